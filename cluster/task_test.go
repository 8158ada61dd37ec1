package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// taskEnv names the environment variable that makes the test binary a task
// of a job instead of running the tests (see TestMain): the tests start it
// under srun.
const taskEnv = "XAM_CLUSTER_TEST_TASK"

// outEnv names the folder where the tasks of the "exchange" mode write
// their reports.
const outEnv = "XAM_CLUSTER_TEST_OUT"

// TestMain runs the binary as a job's task when taskEnv says which, so
// that the tests can launch real tasks under srun; otherwise the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv(taskEnv); mode != "" {
		os.Exit(task(mode))
	}
	os.Exit(m.Run())
}

// taskReport is what a task of the "exchange" mode prints, one JSON line.
type taskReport struct {
	Rank, Size, LocalRank, NodeID, HostID int
	Node                                  string
	Nodes                                 []string
	JobID, StepID                         string
	Values                                map[int]string // what each rank put under "greeting"
	Big                                   map[int]bool   // whether each rank's big value arrived whole
	Cards                                 []Card
}

// greeting is what rank puts: with ';', '%' and a newline, which PMI-2
// cannot carry as themselves.
func greeting(rank int) string { return fmt.Sprintf("hello from %d; 100%% sure\nend", rank) }

// bigValue is longer than PMI-2's value limit, and holds every byte.
func bigValue(rank int) []byte {
	b := make([]byte, 5000)
	for i := range b {
		b[i] = byte(i*7 + rank)
	}
	return b
}

// task runs one task of a job in the given mode and returns its exit code.
func task(mode string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "task: "+format+"\n", args...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := Join(ctx)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	switch mode {
	case "exchange":
		rep, err := exchangeTask(ctx, j)
		if err != nil {
			return fail("rank %d: %v", j.Rank, err)
		}
		b, _ := json.Marshal(rep)
		// One file per task: srun interleaves long lines of several tasks.
		path := filepath.Join(os.Getenv(outEnv), fmt.Sprintf("rank-%d.json", j.Rank))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fail("%v", err)
		}
	case "abort":
		if err := j.Fence(ctx); err != nil {
			return fail("%v", err)
		}
		if j.Rank == 1 {
			j.Abort("rank 1 gives up")
			return fail("still alive after Abort")
		}
		err := j.Fence(ctx) // never completes: rank 1 aborts instead
		return fail("rank %d: the fence after the abort ended: %v", j.Rank, err)
	case "fence-timeout", "fence-hang":
		if j.Rank == j.Size-1 && mode == "fence-timeout" {
			return 0 // leaves without fencing, nor closing
		}
		if j.Rank == j.Size-1 {
			select {} // hangs until Slurm kills it
		}
		j.FenceTimeout, _ = time.ParseDuration(os.Getenv("XAM_CLUSTER_TEST_FENCE"))
		start := time.Now()
		err := j.Fence(context.Background())
		fmt.Printf("rank %d after %v: %v\n", j.Rank, time.Since(start).Round(time.Second), err)
		if errors.Is(err, ErrFenceTimeout) {
			return 3
		}
		return 1
	default:
		return fail("unknown mode %q", mode)
	}
	if err := j.Close(); err != nil {
		return fail("rank %d: close: %v", j.Rank, err)
	}
	return 0
}

// exchangeTask puts, fences, gets every rank's values and exchanges cards.
func exchangeTask(ctx context.Context, j *Job) (*taskReport, error) {
	rep := &taskReport{Rank: j.Rank, Size: j.Size, LocalRank: j.LocalRank, NodeID: j.NodeID, HostID: j.HostID,
		Node: j.Node, Nodes: j.Nodes, JobID: j.JobID, StepID: j.StepID, Values: map[int]string{}, Big: map[int]bool{}}
	if err := j.Put("greeting", []byte(greeting(j.Rank))); err != nil {
		return nil, err
	}
	if err := j.Put("big", bigValue(j.Rank)); err != nil {
		return nil, err
	}
	if err := j.Fence(ctx); err != nil {
		return nil, err
	}
	for r := range j.Size {
		v, err := j.Get(r, "greeting")
		if err != nil {
			return nil, err
		}
		rep.Values[r] = string(v)
		big, err := j.Get(r, "big")
		if err != nil {
			return nil, err
		}
		rep.Big[r] = string(big) == string(bigValue(r))
	}
	if _, err := j.Get(0, "never-put"); !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("Get of a key never put: %v, want ErrNotFound", err)
	}
	cards, err := j.Exchange(ctx, Card{MAC: "02:00:00:00:00:" + fmt.Sprintf("%02x", j.HostID), Queue: j.LocalRank,
		Socket: "/run/xam/fw-" + strconv.Itoa(j.HostID) + ".sock", Endpoints: []uint32{uint32(100 + j.Rank)}})
	if err != nil {
		return nil, err
	}
	rep.Cards = cards
	return rep, nil
}

// readReports reads the reports of size tasks from dir, indexed by rank.
func readReports(t *testing.T, dir string, size int) []taskReport {
	t.Helper()
	reps := make([]taskReport, size)
	files, _ := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	if len(files) != size {
		t.Fatalf("%d tasks reported, want %d: %v", len(files), size, files)
	}
	for r := range reps {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &reps[r]); err != nil {
			t.Fatalf("rank %d's report %q: %v", r, b, err)
		}
		if reps[r].Rank != r {
			t.Fatalf("rank %d's report says rank %d", r, reps[r].Rank)
		}
	}
	return reps
}
