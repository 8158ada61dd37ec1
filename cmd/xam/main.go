// Command xam is the one binary users of xam run: the demo, the lab, the
// firmware daemon, ping and the benchmarks, and offline tools for cells.
//
// Usage:
//
//	xam demo                        the main job (see README.md)
//	xam doctor [--dev IF] [--netns NS] [--json]
//	xam ping [--api raw|ssam|amii|grim|udp|packet] [--mode inline|firmware] [--count N] [--size B] [--timeout D] [--loss P] [--json] [--dev IF (--peer MAC | --serve)]
//	xam fw --dev IF [--netns NS] (--id N --host ID=MAC... | --map | --job | --hostfile FILE --rank N) [--cores LIST] [--socket PATH] [--sleep D] [--metrics ADDR]
//	xam capture --dev IF [--netns NS] --out FILE [--format erf|ether] [--count N] [--duration D] [--buffer BYTES]
//	xam stat --dev IF [--netns NS] [--json]
//	xam lab up [--hosts N] [--switch] [--port-rate R --port-buffer B] [--name X] [--fw [--fw-args A]] [--json]
//	xam lab down --name X | --stale | --all
//	xam lab list [--json]
//	xam bench ssam|logp|amii|permutations|overcommit|incast|grim|engine|hostile|all [--count N] [--bulk BYTES] [--flood N] [--senders LIST] [--sizes LIST] [--port-rate BPS] [--port-buffer BYTES] [--runs N] [--json] [--out DIR]
//	xam bench all [--quick] [--json] [--out DIR]
//	xam cells segment --vpi N --vci N [--uu N] [--hex] [--erf FILE]
//	xam cells reassemble [--hex] [--erf FILE]
//	xam version [--json]             (also xam --version)
//	xam man --dir DIR                (the manual pages, from each command's -h; not in xam help)
//
// Run `xam help` or `xam COMMAND -h` for details.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/xam-project/xam/bench"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// env is what a command sees of the world, so that tests run commands
// in-process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// help, when set, receives a command's flag set and usage where -h
	// would print them (the manual pages are written from these).
	help func(fs *flag.FlagSet, usage string)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
	subs    []string // its subcommands with flags of their own (xam lab up -h)
	hidden  bool     // left out of xam help (a tool for building xam)
}

var commands []command

func init() {
	commands = []command{
		{name: "demo", summary: "the main job: a 2-host veth lab, raw/SSAM/AF_PACKET/UDP ping-pong and a bulk transfer, one table", run: runDemo},
		{name: "doctor", summary: "check the kernel, privileges and a device for what xam needs", run: runDoctor},
		{name: "ping", summary: "round-trip times over raw AF_XDP frames, SSAM, AM-II, AF_PACKET or kernel UDP", run: runPing},
		{name: "fw", summary: "the firmware daemon: an AM-II engine on pinned cores serving endpoints over a unix socket", run: runFw, subs: []string{"stats", "grant"}},
		{name: "capture", summary: "record the xam frames a device carries, for Wireshark (pcap of ATM cells, or pcapng of the frames)", run: runCapture},
		{name: "stat", summary: "counters of the xam XDP program on a device", run: runStat},
		{name: "lab", summary: "build and remove veth/namespace labs: up, down, list", run: runLab, subs: []string{"up", "down", "list"}},
		{name: "bench", summary: "the papers' experiments beside today's peers: all (every one, into a report with plots), ssam, logp, amii, permutations, overcommit, incast, grim; engine (the firmware engine's rates), hostile (forged frames and hostile local users, with traffic running)", run: runBench},
		{name: "cells", summary: "offline cell and AAL5 tools: segment, reassemble, demo", run: runCells, subs: []string{"segment", "reassemble", "demo"}},
		{name: "version", summary: "print xam's version, the revision it was built from, Go's version and the kernel's", run: runVersion},
		{name: "man", summary: "write the manual pages, xam(1) and one per command, from the commands' own help", run: runMan, hidden: true},
	}
}

// errUsage marks errors caused by how xam was invoked; they exit with 2.
// Its text is not shown: wrap it with %w after the message.
var errUsage = errors.New("")

// usageError formats an invocation error.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%s%w", fmt.Sprintf(format, args...), errUsage)
}

func main() {
	// `xam bench hostile` runs xam again as another user, with
	// XAM_HOSTILE_ATTACKER set, to attack the daemons: that process runs
	// the attack and exits here. Without the variable this returns at once.
	bench.HostileChild()
	os.Exit(run(&env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// run dispatches args to a command and returns the exit status: 0 on
// success, 1 when the command failed, 2 for a usage error.
func run(e *env, args []string) int {
	if len(args) == 2 && args[0] == "help" {
		// `xam help CMD` is `xam CMD -h`.
		return run(e, []string{args[1], "-h"})
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(e.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errInterrupted):
			fmt.Fprintf(e.stderr, "xam %s: %v\n", c.name, err)
			return exitInterrupted
		case errors.Is(err, errUsage):
			fmt.Fprintf(e.stderr, "xam %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(e.stderr, "xam %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "xam: unknown command %q (try `xam help`)\n", args[0])
	return 2
}

// tagline says what xam is, in xam help and xam(1).
const tagline = "kernel-bypass cluster messaging over AF_XDP, with ATM cells and Active Messages"

func printHelp(w io.Writer) {
	fmt.Fprintf(w, "xam: %s.\n", tagline)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `xam COMMAND -h` for a command's options.")
}

// newFlags returns a flag set that reports errors instead of exiting and
// prints nothing itself: a bad flag is one line of error (run reports it),
// and -h prints the usage and the options (parseFlags).
func newFlags(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		if e.help != nil {
			e.help(fs, usage)
			return
		}
		fmt.Fprintf(e.stdout, "usage: xam %s\n", usage)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors and
// refusing stray arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q (see xam %s -h)", fs.Arg(0), fs.Name())
	}
	return nil
}

// parseOnly parses args; -h, -help or --help print the usage (and return
// flag.ErrHelp), any other error is one usage error naming the flag.
func parseOnly(fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.Usage()
			return flag.ErrHelp
		}
	}
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on errors too
	defer func() { fs.Usage = usage }()
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v (see xam %s -h)%w", err, fs.Name(), errUsage)
	}
	return nil
}
