package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
)

// report is what a task writes to its file in outEnv: what it saw.
type report struct {
	Rank, Size, HostID, LocalRank int
	Node, JobID                   string
	Tag                           uint64
	Table                         []string // AM-II: rank r's endpoint, "host/endpoint"
	// The all-to-all: requests handled (once each), duplicates, requests
	// out of range, replies received (once each) and duplicates, returns.
	Handled, Dups, Strays, Replies, DupReplies int
	Returned                                   []string
	Seconds                                    float64 // from the first request to the last reply
	// GRIM: whether the registry's name was found, and its owner answered.
	Found, Answered bool
	// Inline: the frames of xam's EtherType the node's XDP program
	// received, and those it dropped (fault injection).
	Received, Dropped uint64
	// twojobs: the reasons the other job's endpoints returned our requests with.
	Cross []string
}

// task runs one task of a test job in mode and returns its exit code: 0,
// or 1 (a failure, said on standard error), 3 (an open failed, said on
// standard output), 4 (a rank is gone, said on standard output).
func task(mode string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "task: "+format+"\n", args...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := cluster.Join(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if d, err := time.ParseDuration(os.Getenv(fenceEnv)); err == nil {
		j.FenceTimeout = d
	}
	rep := &report{Rank: j.Rank, Size: j.Size, HostID: j.HostID, LocalRank: j.LocalRank, Node: j.Node, JobID: j.JobID}
	switch mode {
	case "amii", "kill":
		err = amiiTask(j, rep, mode == "kill")
	case "grim":
		err = grimTask(j, rep)
	case "ssam":
		err = ssamTask(j, rep)
	case "twojobs":
		err = twoJobsTask(j, rep)
	case "fence", "openfail":
		return openFailTask(j, mode)
	default:
		return fail("unknown mode %q", mode)
	}
	if err != nil {
		var oe *OpenError
		if errors.As(err, &oe) {
			fmt.Printf("rank %d: %v\n", j.Rank, err)
			return 3
		}
		return fail("rank %d: %v", j.Rank, err)
	}
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(filepath.Join(os.Getenv(outEnv), fmt.Sprintf("rank-%d.json", j.Rank)), b, 0o644); err != nil {
		return fail("%v", err)
	}
	if err := j.Close(); err != nil {
		return fail("rank %d: closing the job: %v", j.Rank, err)
	}
	return 0
}

// config is the tasks' Config: inline on the lab host's eth0, or through
// the host's daemon.
func config(j *cluster.Job) Config {
	// A generous give-up time for a request waiting for a credit: a
	// request to a rank that died comes back after the transport's (3 s).
	ac := amii.Config{Credits: 16, GiveUp: 20 * time.Second}
	// GRIM's waits (a channel's room, the registry's answer to Publish)
	// as generous: the default 10 s is less than what eight tasks and
	// four daemons on two loaded cores can take to answer every Publish.
	gc := grim.Config{GiveUp: time.Minute, ReplyTimeout: time.Minute}
	if os.Getenv(modeEnv) == string(Firmware) {
		return Config{Mode: Firmware, Socket: fmt.Sprintf(os.Getenv(socketEnv), j.HostID), AMII: ac, GRIM: gc}
	}
	// Up to 8 messages of an endpoint in flight (one per channel of the
	// transport to a host), as the daemons run (--window 8).
	return Config{Mode: Inline, Device: "eth0", AMII: ac, GRIM: gc, Engine: nicfw.EngineConfig{Window: 8}}
}

// count is the number of requests from each rank to each other.
func count() int {
	n, err := strconv.Atoi(os.Getenv(countEnv))
	if err != nil || n <= 0 {
		return 100
	}
	return n
}

// setLoss makes the node's XDP program drop a fraction of xam's frames.
func setLoss(dp interface{ SetFaults(loader.Faults) error }) error {
	loss, err := strconv.ParseFloat(os.Getenv(lossEnv), 64)
	if err != nil || loss == 0 {
		return nil
	}
	return dp.SetFaults(loader.Faults{DropRate: loss})
}

// countFrames records what the node's XDP program received and dropped.
func countFrames(prog *loader.Program, rep *report) error {
	c, err := prog.Counters()
	rep.Received, rep.Dropped = c.Received, c.FaultDropped
	return err
}

// tally counts an all-to-all's messages by sender and sequence number:
// each is to be seen exactly once.
type tally struct {
	n        int
	got      [][]bool // requests handled, by sender and sequence number
	answered [][]bool // replies, by replier and sequence number
	rep      *report
}

func newTally(size, n int, rep *report) *tally {
	t := &tally{n: n, rep: rep, got: make([][]bool, size), answered: make([][]bool, size)}
	for r := range size {
		t.got[r], t.answered[r] = make([]bool, n), make([]bool, n)
	}
	return t
}

// request counts a request from src with sequence number seq.
func (t *tally) request(src int, seq uint64) {
	switch {
	case src < 0 || src >= len(t.got) || seq >= uint64(t.n):
		t.rep.Strays++
	case t.got[src][seq]:
		t.rep.Dups++
	default:
		t.got[src][seq] = true
		t.rep.Handled++
	}
}

// reply counts a reply from src to our request seq.
func (t *tally) reply(src int, seq uint64) {
	switch {
	case src < 0 || src >= len(t.answered) || seq >= uint64(t.n):
		t.rep.Strays++
	case t.answered[src][seq]:
		t.rep.DupReplies++
	default:
		t.answered[src][seq] = true
		t.rep.Replies++
	}
}

// amiiTask opens the job's AM-II endpoint and runs the all-to-all. With
// kill, the last rank kills itself once it has handled a few requests; the
// others report it gone, as their returned requests say, and exit 4.
func amiiTask(j *cluster.Job, rep *report, kill bool) error {
	ctx := context.Background()
	cfg := config(j)
	var x *exchange
	cfg.SetupAMII = func(a *AMII) error {
		x = setupExchange(a, count(), rep)
		a.OnReturn(func(r amii.Returned) {
			if err := a.Lost(r); err != nil && kill {
				fmt.Printf("rank %d: %v\n", j.Rank, err)
				os.Exit(4)
			}
			rep.Returned = append(rep.Returned, r.String())
		})
		return nil
	}
	a, err := OpenAMII(ctx, j, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	rep.Tag = a.Tag
	for _, nm := range a.Table {
		rep.Table = append(rep.Table, fmt.Sprintf("%d/%d", nm.Host, nm.Endpoint))
	}
	if a.DataPath != nil {
		if err := setLoss(a.DataPath.Prog); err != nil {
			return err
		}
	}
	victim := kill && j.Rank == j.Size-1
	if err := x.run(func() {
		if victim && rep.Handled >= 20 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}); err != nil {
		return err
	}
	if a.DataPath != nil {
		if err := countFrames(a.DataPath.Prog, rep); err != nil {
			return err
		}
	}
	return a.Barrier(ctx)
}

// exchange is an all-to-all over AM-II: n requests from this rank to every
// other, each answered by an explicit reply, every one counted.
type exchange struct {
	a                *AMII
	n                int
	t                *tally
	rep              *report
	requestH, replyH amii.HandlerID
	replyErr         error
}

// setupExchange registers the all-to-all's handlers on a (in the open's
// setup: before any rank sends).
func setupExchange(a *AMII, n int, rep *report) *exchange {
	x := &exchange{a: a, n: n, t: newTally(a.Job.Size, n, rep), rep: rep}
	x.requestH = a.Register(func(tok *amii.Token, args []uint64) {
		x.t.request(tok.Source(), args[0])
		if err := tok.Reply(x.replyH, args[0]); err != nil && x.replyErr == nil {
			x.replyErr = err
		}
	})
	x.replyH = a.Register(func(tok *amii.Token, args []uint64) { x.t.reply(tok.Source(), args[0]) })
	return x
}

// run sends the requests and waits for every reply, for at most a minute;
// check runs after every send and wait.
func (x *exchange) run(check func()) error {
	a, rep := x.a, x.rep
	size, rank := a.Job.Size, a.Job.Rank
	start := time.Now()
	for seq := range x.n {
		for k := 1; k < size; k++ {
			if err := a.Request((rank+k)%size, x.requestH, uint64(seq)); err != nil {
				return fmt.Errorf("request %d to rank %d: %w", seq, (rank+k)%size, err)
			}
			check()
		}
	}
	want := x.n * (size - 1)
	deadline := time.Now().Add(time.Minute)
	for rep.Replies < want && len(rep.Returned) == 0 && x.replyErr == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d replies of %d after a minute", rep.Replies, want)
		}
		if _, err := a.Wait(10 * time.Millisecond); err != nil {
			return err
		}
		if _, err := a.Poll(); err != nil {
			return err
		}
		check()
	}
	rep.Seconds = time.Since(start).Seconds()
	if x.replyErr != nil {
		return fmt.Errorf("replying: %w", x.replyErr)
	}
	if len(rep.Returned) > 0 {
		return fmt.Errorf("%d requests came back, the first: %s", len(rep.Returned), rep.Returned[0])
	}
	return nil
}

// openFailTask: in mode fence, the last rank never opens (it waits until
// the others have failed, and leaves); in mode openfail, rank 2 names a
// device its node does not have. The others' opens fail, said on standard
// output; exit 3.
func openFailTask(j *cluster.Job, mode string) int {
	cfg := config(j)
	said := func(r int) string { return filepath.Join(os.Getenv(outEnv), fmt.Sprintf("said-%d", r)) }
	if mode == "fence" && j.Rank == j.Size-1 {
		deadline := time.Now().Add(2 * time.Minute)
		for r := 0; r < j.Size-1 && time.Now().Before(deadline); {
			if _, err := os.Stat(said(r)); err == nil {
				r++
				continue
			}
			time.Sleep(50 * time.Millisecond)
		}
		return 5
	}
	if mode == "openfail" && j.Rank == 2 {
		cfg.Device = "nosuchdev0"
	}
	start := time.Now()
	a, err := OpenAMII(context.Background(), j, cfg)
	if err == nil {
		a.Close()
		fmt.Printf("rank %d: opened\n", j.Rank)
		return 0
	}
	var oe *OpenError
	fmt.Printf("rank %d after %v: %v (fence timeout: %v, open error: %v)\n", j.Rank, time.Since(start).Round(time.Second), err,
		errors.Is(err, cluster.ErrFenceTimeout), errors.As(err, &oe))
	os.WriteFile(said(j.Rank), nil, 0o644) //nolint:errcheck // the last rank of mode fence then waits on
	return 3
}
