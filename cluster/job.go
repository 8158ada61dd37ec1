package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultFenceTimeout bounds a fence whose context has no deadline: long
// enough for the slowest task of a big job to arrive on a loaded machine,
// short enough that a job whose task died says so.
const DefaultFenceTimeout = 2 * time.Minute

// Errors of a job; match them with errors.Is.
var (
	// ErrNoLauncher: the process was not started as a task of a job.
	ErrNoLauncher = errors.New("cluster: not a task of a job")
	// ErrFenceTimeout: a fence did not complete in time, because some task
	// never reached it.
	ErrFenceTimeout = errors.New("cluster: fence timed out")
	// ErrNotFound: no value under that rank and key after the last fence.
	ErrNotFound = errors.New("cluster: no such value")
	// ErrAborted: a task aborted the job (with a hostfile; under Slurm the
	// launcher kills the tasks instead).
	ErrAborted = errors.New("cluster: the job was aborted")
	// ErrTaskLost: a task left the job without closing it (hostfile).
	ErrTaskLost = errors.New("cluster: a task left the job")
	// ErrClosed: the job was closed.
	ErrClosed = errors.New("cluster: job closed")
)

// Job is this task's view of a parallel job: who it is, where the others
// are, and a key-value space shared by all tasks (Put, Fence, Get).
//
// The fields are set by Join or FromHostfile and never change. The methods
// are safe for concurrent use, though a job's tasks must fence in step: a
// fence completes when every task has called Fence once more.
type Job struct {
	Launcher  string   // "slurm" or "hostfile"
	Rank      int      // this task's rank, 0 <= Rank < Size
	Size      int      // number of tasks
	LocalRank int      // rank among the tasks of this node
	NodeID    int      // index of this task's node in Nodes
	Node      string   // this task's node: Nodes[NodeID]
	Nodes     []string // the nodes of the job (Slurm: of the step), in order
	// HostID is this node's index in the job's allocation (Slurm:
	// SLURM_JOB_NODELIST; with a hostfile, its node order): the same for
	// every task of the node and for every step of the job, so that an
	// application's step and a daemon's step agree on it.
	HostID       int
	JobID        string           // Slurm's SLURM_JOB_ID; a hostfile's digest
	StepID       string           // Slurm's SLURM_STEP_ID; "" with a hostfile
	SpawnerJobID string           // PMI-2: the job that spawned this one, "" if none
	Device       string           // hostfile: this rank's network device; "" under Slurm
	MAC          net.HardwareAddr // hostfile: this rank's MAC, when given

	// FenceTimeout bounds a fence whose context has no deadline
	// (DefaultFenceTimeout when zero). Set it before the first Fence.
	FenceTimeout time.Duration

	kv kvBackend

	mu        sync.Mutex
	put       map[string]bool // keys this task has put, each once
	exchanges int             // Exchange calls so far, naming their keys
}

// kvBackend is the launcher's key-value space, with keys and values already
// in their wire form (keyOf, encodeValue): no ';', '=' or NUL, values at
// most maxWireValue bytes.
type kvBackend interface {
	put(ctx context.Context, key, value string) error
	fence(ctx context.Context) error
	get(ctx context.Context, rank int, key string) (string, bool, error)
	abort(msg string) error
	close(ctx context.Context) error
}

// Put publishes value under key for the other tasks, who read it with
// Get(this rank, key) after the next fence. A task puts each key once.
// Keys are 1 to 40 bytes of letters, digits and ".-_:/"; values any bytes,
// up to 1 MiB (under PMI-2 a value longer than its 1024-byte limit travels
// as numbered pieces).
func (j *Job) Put(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > maxValue {
		return fmt.Errorf("cluster: value of %q is %d bytes, more than %d", key, len(value), maxValue)
	}
	j.mu.Lock()
	if j.put[key] {
		j.mu.Unlock()
		return fmt.Errorf("cluster: key %q was already put by this task (put each key once)", key)
	}
	if j.put == nil {
		j.put = map[string]bool{}
	}
	j.put[key] = true
	j.mu.Unlock()
	ctx := context.Background()
	pieces := encodeValue(value)
	if len(pieces) == 1 {
		return j.kv.put(ctx, keyOf(j.Rank, key, -1), "v"+pieces[0])
	}
	for i, p := range pieces {
		if err := j.kv.put(ctx, keyOf(j.Rank, key, i), p); err != nil {
			return err
		}
	}
	return j.kv.put(ctx, keyOf(j.Rank, key, -1), "n"+strconv.Itoa(len(pieces)))
}

// Fence waits until every task of the job has called Fence; then the values
// put before it are visible to all. It ends with ctx, or, when ctx has no
// deadline, after FenceTimeout, with an error wrapping ErrFenceTimeout: a
// task of the job never reached the fence. The job is then unusable.
func (j *Job) Fence(ctx context.Context) error {
	timeout := j.FenceTimeout
	if timeout <= 0 {
		timeout = DefaultFenceTimeout
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	err := j.kv.fence(ctx)
	if err == nil || errors.Is(err, ErrAborted) || errors.Is(err, ErrTaskLost) {
		return err
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("cluster: fence canceled: %w", err)
	}
	if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w after %v: a task of the job never reached the fence (it died, hangs, or was not started); "+
			"rank %d of %d stopped waiting", ErrFenceTimeout, time.Since(start).Round(10*time.Millisecond), j.Rank, j.Size)
	}
	return err
}

// Get returns the value rank put under key before the last fence; an error
// wrapping ErrNotFound when it put none.
func (j *Job) Get(rank int, key string) ([]byte, error) {
	if rank < 0 || rank >= j.Size {
		return nil, fmt.Errorf("cluster: rank %d out of range [0, %d)", rank, j.Size)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	ctx := context.Background()
	head, err := j.getWire(ctx, rank, keyOf(rank, key, -1))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: rank %d put nothing under %q before the last fence", ErrNotFound, rank, key)
		}
		return nil, err
	}
	switch {
	case strings.HasPrefix(head, "v"):
		return decodeValue(head[1:])
	case strings.HasPrefix(head, "n"):
		n, err := strconv.Atoi(head[1:])
		if err != nil || n < 2 || n > maxPieces {
			return nil, fmt.Errorf("cluster: rank %d's value of %q: bad piece count %q", rank, key, head)
		}
		var value []byte
		for i := range n {
			p, err := j.getWire(ctx, rank, keyOf(rank, key, i))
			if err != nil {
				return nil, fmt.Errorf("cluster: rank %d's value of %q, piece %d of %d: %w", rank, key, i, n, err)
			}
			b, err := decodeValue(p)
			if err != nil {
				return nil, err
			}
			value = append(value, b...)
		}
		return value, nil
	}
	return nil, fmt.Errorf("cluster: rank %d's value of %q: not written by this package (%.20q)", rank, key, head)
}

// getWire reads one wire key.
func (j *Job) getWire(ctx context.Context, rank int, key string) (string, error) {
	v, ok, err := j.kv.get(ctx, rank, key)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}

// Abort ends the whole job: it prints "xam: rank R aborts the job: MSG" on
// standard error (Slurm shows no message) and asks the launcher to stop
// every task. Under Slurm, slurmstepd kills every task of the step, this one
// too, with SIGKILL, and srun reports them killed; Abort returns only if
// that has not happened within a few seconds. With a hostfile the other
// tasks' calls fail with ErrAborted and Abort returns; the caller exits.
func (j *Job) Abort(msg string) error {
	fmt.Fprintf(os.Stderr, "xam: rank %d aborts the job: %s\n", j.Rank, msg)
	return j.kv.abort(msg)
}

// Close ends this task's part in the job (PMI-2: finalize). With a
// hostfile, rank 0's Close waits until every task has closed, as rank 0
// serves the others' fences.
func (j *Job) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFenceTimeout)
	defer cancel()
	return j.kv.close(ctx)
}

// String describes the task, for logs.
func (j *Job) String() string {
	return fmt.Sprintf("rank %d of %d on %s (node %d, host id %d, local rank %d; %s job %s)",
		j.Rank, j.Size, j.Node, j.NodeID, j.HostID, j.LocalRank, j.Launcher, j.JobID)
}
