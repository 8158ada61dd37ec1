package main

import (
	"os"
	"strings"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// argsEnv makes the test binary the command, with these arguments: the
// tests run it as the tasks of a Slurm job.
const argsEnv = "XAM_ALLREDUCE_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(argsEnv); ok {
		os.Exit(cli(strings.Fields(args), os.Stdout, os.Stderr))
	}
	testenv.MainWithLeakCheck(m)
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-rank", "1"}, {"extra"}, {"-bogus"}} {
		var out, errb strings.Builder
		if code := cli(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%q: exit %d, %q", args, code, errb.String())
		}
	}
}
