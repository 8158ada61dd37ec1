package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw"
)

// The open protocol: every task of the job runs it, in step, for each
// endpoint it opens.
//
//  1. Rank 0 draws the virtual network's tag (unless Config.Tag gives one)
//     and puts it under the open's key; each task prepares its card (its
//     node's MAC, its daemon's socket, the endpoint id it takes).
//  2. The tasks exchange their cards (cluster.Job.Exchange: a fence), and
//     the others read the tag.
//  3. Each task opens its endpoint, with the translation table built from
//     the cards, and puts how that went: "ok", "retry" (the id it took was
//     taken meanwhile on its daemon, by another job's task) or the error.
//  4. A fence; then every task reads every status. All ok: the endpoints
//     of every rank exist, and messages may flow. A retry, and no error:
//     every task closes what it opened and goes again from 1 with other
//     ids. An error: every task closes what it opened and returns the same
//     *OpenError, naming the rank that failed and why.
//
// So a task that cannot open (no such device, no daemon, a daemon that is
// another host) makes every rank's open fail with its reason, rather than
// leave them waiting; a task that never comes makes the first fence fail
// with cluster.ErrFenceTimeout.

// maxAttempts bounds the rounds of an open whose ids are taken by others.
const maxAttempts = 4

// OpenError is a rank's failure to open its endpoint: every rank's open
// returns it. Err is this rank's own error (errors.Is and As see it), nil
// when another rank failed.
type OpenError struct {
	API    string // "AM-II", "GRIM" or "SSAM"
	Rank   int
	Node   string
	Msg    string
	Others int // how many more ranks failed
	Err    error
}

func (e *OpenError) Error() string {
	s := fmt.Sprintf("job: rank %d (node %s) could not open its %s endpoint: %s", e.Rank, e.Node, e.API, e.Msg)
	if e.Others > 0 {
		s += fmt.Sprintf(" (and %d more ranks failed)", e.Others)
	}
	return s
}

func (e *OpenError) Unwrap() error { return e.Err }

// errRetry marks an open that may succeed with other endpoint ids.
var errRetry = errors.New("job: endpoint id taken meanwhile")

// cardError is a task's refusal of the cards it got: often the
// consequence of another task's failure (a task that could not prepare
// publishes an empty card), which that task reports itself.
type cardError struct{ error }

func (e cardError) Unwrap() error { return e.error }

// opens numbers the opens of each job in this process: every task opens its
// endpoints in the same order, so the n-th open's keys are the same on all.
var opens struct {
	sync.Mutex
	n map[*cluster.Job]int
}

func nextOpen(j *cluster.Job) int {
	opens.Lock()
	defer opens.Unlock()
	if opens.n == nil {
		opens.n = map[*cluster.Job]int{}
	}
	n := opens.n[j]
	opens.n[j] = n + 1
	return n
}

// round is one open: api names the endpoint type for errors; prepare makes
// this task's card for an attempt (tag is 0 on attempt 0 except at rank
// 0); open opens the endpoint from everyone's cards and returns what
// closes it.
type round struct {
	api     string
	tag     uint64 // Config.Tag, or 0 to draw one
	prepare func(attempt int, tag uint64) (cluster.Card, error)
	open    func(cards []cluster.Card, tag uint64) (closer func() error, err error)
}

// run runs the open protocol.
func (o *round) run(ctx context.Context, j *cluster.Job) error {
	n := nextOpen(j)
	key := func(what string) string { return "xam.open." + strconv.Itoa(n) + "." + what }
	tag := o.tag
	if tag == 0 && j.Rank == 0 {
		tag = newTag()
		if err := j.Put(key("tag"), []byte(strconv.FormatUint(tag, 16))); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		card, err := o.prepare(attempt, tag)
		cards, xerr := j.Exchange(ctx, card)
		if xerr != nil {
			return fmt.Errorf("job: opening the %s endpoints: exchanging cards: %w", o.api, xerr)
		}
		if tag == 0 {
			b, gerr := j.Get(0, key("tag"))
			if gerr == nil {
				tag, gerr = strconv.ParseUint(string(b), 16, 64)
			}
			if gerr != nil || tag == 0 {
				return fmt.Errorf("job: opening the %s endpoints: rank 0's tag: %v", o.api, gerr)
			}
		}
		var closer func() error
		if err == nil {
			closer, err = o.open(cards, tag)
		}
		failed, retry, serr := o.statuses(ctx, j, key("status."+strconv.Itoa(attempt)), cards, err)
		if serr == nil && failed == nil && !retry {
			return nil
		}
		if closer != nil {
			closer() //nolint:errcheck // the open failed elsewhere: what matters is why
		}
		switch {
		case serr != nil:
			return serr
		case failed != nil:
			return failed
		case attempt+1 >= maxAttempts:
			return fmt.Errorf("job: opening the %s endpoints: endpoint ids still taken by others after %d rounds", o.api, maxAttempts)
		}
	}
}

// statuses publishes this task's outcome, fences, and reads everyone's: the
// first failure as an *OpenError, and whether some rank asks to retry.
func (o *round) statuses(ctx context.Context, j *cluster.Job, key string, cards []cluster.Card, mine error) (*OpenError, bool, error) {
	status := "ok"
	var ce cardError
	switch {
	case errors.Is(mine, errRetry) || errors.Is(mine, nicfw.ErrEndpointInUse):
		status = "retry " + mine.Error()
	case errors.As(mine, &ce):
		status = "cards " + mine.Error()
	case mine != nil:
		status = "error " + mine.Error()
	}
	if err := j.Put(key, []byte(status)); err != nil {
		return nil, false, err
	}
	if err := j.Fence(ctx); err != nil {
		return nil, false, fmt.Errorf("job: opening the %s endpoints: the fence after opening: %w", o.api, err)
	}
	// The first rank that failed on its own, else the first that refused
	// the cards.
	var failed, refused *OpenError
	retry := false
	for r := range j.Size {
		b, err := j.Get(r, key)
		if err != nil {
			return nil, false, fmt.Errorf("job: opening the %s endpoints: rank %d's status: %w", o.api, r, err)
		}
		s := string(b)
		first := &failed
		switch {
		case s == "ok":
			continue
		case strings.HasPrefix(s, "retry "):
			retry = true
			continue
		case strings.HasPrefix(s, "cards "):
			first = &refused
		}
		if *first != nil {
			(*first).Others++
			continue
		}
		*first = &OpenError{API: o.api, Rank: r, Node: cards[r].Node, Msg: s[len("error "):]}
		if r == j.Rank {
			(*first).Err = mine
		}
	}
	if failed == nil {
		failed = refused
	}
	return failed, retry, nil
}
