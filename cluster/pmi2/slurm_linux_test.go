package pmi2

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/slurmtest"
)

// taskEnv makes the test binary a task under srun (TestMain), writing its
// findings to the folder it names.
const taskEnv = "XAM_PMI2_TEST_TASK"

func TestMain(m *testing.M) {
	if dir := os.Getenv(taskEnv); dir != "" {
		if err := probeTask(dir); err != nil {
			fmt.Fprintln(os.Stderr, "task:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe is what a task learned of Slurm's PMI-2 server.
type probe struct {
	Init
	Semicolon  string // what a value "a;b" (sent as "a;;b") came back as
	AfterSemi  bool   // whether a put whose key follows a value "x;y" arrived
	Replaced   string // a key put twice: the value kept
	Limit      string // a value of MaxValLen bytes, back
	Neighbour  string // the next rank's value
	NotFound   bool   // a key nobody put: found
	GetAgain   string // a value put before the first fence, after a second one
	FinalizeOK bool
}

// probeTask runs on each task: the handshake, puts and gets that test what
// the server does, written to dir/rank-N.json.
func probeTask(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fd, _ := strconv.Atoi(os.Getenv("PMI_FD"))
	rank, _ := strconv.Atoi(os.Getenv("PMI_RANK"))
	c, err := Open(ctx, fd, os.Getenv("PMI_JOBID"), rank)
	if err != nil {
		return err
	}
	p := probe{Init: c.Init}
	me := strconv.Itoa(c.Rank)
	// A value with ';', escaped as PMI-2 says; and one followed in its
	// message by the key, which the server would have to read past it.
	if _, err := c.request(ctx, DefaultTimeout, Message{Cmd: "kvs-put", Pairs: []Pair{
		{"key", "semi-" + me}, {"value", "a;b"}}}, "kvs-put-response"); err != nil {
		return err
	}
	if _, err := c.request(ctx, DefaultTimeout, Message{Cmd: "kvs-put", Pairs: []Pair{
		{"value", "x;y"}, {"key", "after-" + me}}}, "kvs-put-response"); err != nil {
		return err
	}
	long := make([]byte, MaxValLen)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	puts := []Pair{{"twice-" + me, "first"}, {"twice-" + me, "second"}, {"limit-" + me, string(long)}, {"rank-" + me, "value of " + me}}
	for _, kv := range puts {
		if err := c.Put(ctx, kv.Key, kv.Value); err != nil {
			return err
		}
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	var found bool
	if p.Semicolon, _, err = c.Get(ctx, "semi-"+me); err != nil {
		return err
	}
	if _, p.AfterSemi, err = c.Get(ctx, "after-"+me); err != nil {
		return err
	}
	if p.Replaced, _, err = c.Get(ctx, "twice-"+me); err != nil {
		return err
	}
	if p.Limit, _, err = c.Get(ctx, "limit-"+me); err != nil {
		return err
	}
	if p.Neighbour, _, err = c.Get(ctx, "rank-"+strconv.Itoa((c.Rank+1)%c.Size)); err != nil {
		return err
	}
	if _, p.NotFound, err = c.Get(ctx, "nobody-put-this"); err != nil {
		return err
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	if p.GetAgain, found, err = c.Get(ctx, "rank-0"); err != nil || !found {
		return fmt.Errorf("rank-0 after a second fence: %q %v %v", p.GetAgain, found, err)
	}
	p.FinalizeOK = c.Finalize(ctx) == nil
	b, _ := json.Marshal(p)
	return os.WriteFile(filepath.Join(dir, "rank-"+me+".json"), b, 0o644)
}

// TestSlurmServer checks, against the real slurmstepd of Slurm 22.05, what
// the package documentation says of its PMI-2 server: the handshake and
// fullinit's answer, job-getid, kvs-put/fence/get across three tasks on two
// nodes, a value of the full 1024 bytes, a key put twice, a key nobody put,
// values visible after a later fence, finalize — and that it cuts a value at
// ';' although PMI-2 escapes it as ";;".
func TestSlurmServer(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.WithNodes(2))
	dir := t.TempDir()
	cmd := c.Srun(t, "-N", "2", "-n", "3", "--mpi=pmi2", os.Args[0])
	cmd.Env = append(cmd.Env, taskEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	long := make([]byte, MaxValLen)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	for r := range 3 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		var p probe
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if r == 0 {
			t.Logf("rank 0 learned: %s", b[:min(len(b), 300)])
		}
		want := probe{Init: Init{Rank: r, Size: 3, AppNum: -1, JobID: "1.0"},
			Semicolon: "a", AfterSemi: false, Replaced: "second", Limit: string(long),
			Neighbour: "value of " + strconv.Itoa((r+1)%3), NotFound: false, GetAgain: "value of 0", FinalizeOK: true}
		if p != want {
			t.Errorf("rank %d learned %+v\nwant %+v", r, p, want)
		}
	}
}
