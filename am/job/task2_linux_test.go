package job

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cluster"
)

// waitFor runs poll (which waits a little) until done, for at most d.
func waitFor(d time.Duration, what string, done func() bool, poll func() error) error {
	deadline := time.Now().Add(d)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, d)
		}
		if err := poll(); err != nil {
			return err
		}
	}
	return nil
}

// The GRIM task's handlers.
const (
	grimRequest = grim.FirstUserHandler + iota
	grimReply
	grimEchoed
	grimEcho // named "job.echo" by rank 2
)

// setupGRIM registers the GRIM task's handlers: the all-to-all's, and at
// rank 2 the one it names in the registry.
func setupGRIM(g *GRIM, t *tally, rep *report) error {
	g.OnReturn(func(r grim.Returned) { rep.Returned = append(rep.Returned, r.String()) })
	var err error
	handle := func(id grim.HandlerID, h grim.Handler) {
		if err == nil {
			err = g.Handle(id, h)
		}
	}
	handle(grimRequest, func(tok *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
		peer, _ := tok.Source()
		t.request(peer, uint64(args[0]))
		tok.Reply(grimReply, args[0]) //nolint:errcheck // a failure leaves a reply missing, which the sender reports
	})
	handle(grimReply, func(tok *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
		peer, _ := tok.Source()
		t.reply(peer, uint64(args[0]))
	})
	handle(grimEchoed, func(_ *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
		rep.Answered = args[0] == uint32(g.Job.Rank)+1000
	})
	if err == nil && g.Job.Rank == 2 {
		err = g.HandleNamed("job.echo", grimEcho, func(tok *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
			tok.Reply(grimEchoed, args[0]+1000) //nolint:errcheck // the caller reports a missing answer
		})
	}
	return err
}

// grimTask opens the job's GRIM endpoint; rank 2 names a handler, every
// rank publishes, finds it in the registry and calls it; then the
// all-to-all of short messages.
func grimTask(j *cluster.Job, rep *report) error {
	ctx := context.Background()
	n, size := count(), j.Size
	t := newTally(size, n, rep)
	cfg := config(j)
	cfg.SetupGRIM = func(g *GRIM) error { return setupGRIM(g, t, rep) }
	g, err := OpenGRIM(ctx, j, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	rep.Tag = g.Tag
	if g.DataPath != nil {
		if err := setLoss(g.DataPath.Prog); err != nil {
			return err
		}
	}
	if err := g.Publish(); err != nil {
		return fmt.Errorf("publish: %w (stats %+v; returned %v)", err, g.Stats(), rep.Returned)
	}
	if err := g.Barrier(ctx); err != nil {
		return fmt.Errorf("%w (stats %+v; returned %v; queues %s)", err, g.Stats(), rep.Returned, g.QueueState())
	}
	poll := func() error {
		if _, err := g.Wait(10 * time.Millisecond); err != nil {
			return err
		}
		_, err := g.Poll()
		return err
	}
	if err := waitFor(30*time.Second, "job.echo in the registry", func() bool { _, ok := g.Lookup("job.echo"); return ok }, poll); err != nil {
		return err
	}
	rep.Found = true
	peer, id, err := g.Owner("job.echo")
	if err != nil {
		return err
	}
	ch, _ := g.Channel(0)
	if err := ch.Short(peer, id, uint32(j.Rank)); err != nil {
		return fmt.Errorf("calling job.echo at rank %d: %w", peer, err)
	}
	if err := waitFor(30*time.Second, "job.echo's answer", func() bool { return rep.Answered || len(rep.Returned) > 0 }, poll); err != nil {
		return err
	}

	// At most grimWindow requests outstanding: a channel is ordered, and a
	// reply to this rank leaves its replier behind the requests the
	// replier queued before it, which would otherwise be all of them.
	const grimWindow = 16
	start := time.Now()
	for seq := range n {
		for k := 1; k < size; k++ {
			if err := waitFor(time.Minute, "room in the window", func() bool { return ch.Outstanding() < grimWindow || len(rep.Returned) > 0 }, poll); err != nil {
				return err
			}
			if err := ch.Short((j.Rank+k)%size, grimRequest, uint32(seq)); err != nil {
				return fmt.Errorf("short %d to rank %d: %w", seq, (j.Rank+k)%size, err)
			}
		}
	}
	want := n * (size - 1)
	if err := waitFor(time.Minute, "every reply", func() bool { return rep.Replies == want || len(rep.Returned) > 0 }, poll); err != nil {
		return fmt.Errorf("%w (%d of %d)", err, rep.Replies, want)
	}
	rep.Seconds = time.Since(start).Seconds()
	if g.DataPath != nil {
		if err := countFrames(g.DataPath.Prog, rep); err != nil {
			return err
		}
	}
	return g.Barrier(ctx)
}

// ssamTask opens the job's SSAM endpoint and runs the all-to-all over its
// connections, each request carrying its sequence number.
func ssamTask(j *cluster.Job, rep *report) error {
	ctx := context.Background()
	n, size := count(), j.Size
	t := newTally(size, n, rep)
	cfg := config(j)
	var requestH, replyH ssam.HandlerID
	cfg.SetupSSAM = func(s *SSAM) error {
		s.OnReturn(func(r ssam.Returned) { rep.Returned = append(rep.Returned, fmt.Sprint(r)) })
		requestH = s.Register(func(tok *ssam.Token, data []byte) {
			t.request(s.Rank(tok.Source()), binary.BigEndian.Uint64(data))
			tok.Reply(replyH, data) //nolint:errcheck // a failure leaves a reply missing, which the sender reports
		})
		replyH = s.Register(func(tok *ssam.Token, data []byte) { t.reply(s.Rank(tok.Source()), binary.BigEndian.Uint64(data)) })
		return nil
	}
	s, err := OpenSSAM(ctx, j, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := setLoss(s.DataPath.Prog); err != nil {
		return err
	}
	start := time.Now()
	var msg [8]byte
	for seq := range n {
		for k := 1; k < size; k++ {
			binary.BigEndian.PutUint64(msg[:], uint64(seq))
			if err := s.Request(s.Conn((j.Rank+k)%size), requestH, msg[:]); err != nil {
				return fmt.Errorf("request %d to rank %d: %w", seq, (j.Rank+k)%size, err)
			}
		}
	}
	want := n * (size - 1)
	if err := waitFor(time.Minute, "every reply", func() bool { return rep.Replies == want || len(rep.Returned) > 0 }, func() error {
		_, err := s.Poll()
		time.Sleep(20 * time.Microsecond)
		return err
	}); err != nil {
		return fmt.Errorf("%w (%d of %d)", err, rep.Replies, want)
	}
	rep.Seconds = time.Since(start).Seconds()
	if err := countFrames(s.DataPath.Prog, rep); err != nil {
		return err
	}
	return s.Barrier(ctx)
}

// names is what rank 0 of each job of twojobs publishes in the shared
// folder: its virtual network's tag and every rank's endpoint.
type names struct {
	Tag   uint64
	Table []amii.Name
}

// twoJobsTask runs in each of two jobs on the same nodes, through the
// same daemons: its own all-to-all, then a request from an endpoint of its
// virtual network (its tag) to every endpoint of the other job's, each of
// which is to come back with the other network's refusal (ReasonBadTag).
func twoJobsTask(j *cluster.Job, rep *report) error {
	ctx := context.Background()
	cfg := config(j)
	var x *exchange
	cfg.SetupAMII = func(a *AMII) error {
		x = setupExchange(a, count(), rep)
		a.OnReturn(func(r amii.Returned) { rep.Returned = append(rep.Returned, r.String()) })
		return nil
	}
	a, err := OpenAMII(ctx, j, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	rep.Tag = a.Tag
	shared := filepath.Dir(os.Getenv(outEnv))
	label, other := os.Getenv(labelEnv), "A"
	if label == "A" {
		other = "B"
	}
	if j.Rank == 0 {
		b, _ := json.Marshal(names{Tag: a.Tag, Table: a.Table})
		if err := writeAtomic(filepath.Join(shared, "names-"+label), b); err != nil {
			return err
		}
	}
	if err := x.run(func() {}); err != nil {
		return err
	}
	serve := func() error {
		if _, err := a.Wait(10 * time.Millisecond); err != nil {
			return err
		}
		_, err := a.Poll()
		return err
	}
	var theirs names
	if err := waitFor(time.Minute, "the other job's names", func() bool {
		b, err := os.ReadFile(filepath.Join(shared, "names-"+other))
		return err == nil && json.Unmarshal(b, &theirs) == nil
	}, serve); err != nil {
		return err
	}
	if err := crossRequests(cfg.Socket, a.Tag, theirs.Table, rep); err != nil {
		return err
	}
	if err := a.Barrier(ctx); err != nil {
		return err
	}
	if j.Rank == 0 {
		if err := writeAtomic(filepath.Join(shared, "done-"+label), nil); err != nil {
			return err
		}
	}
	// Stay open until the other job has sent to this one's endpoints.
	return waitFor(2*time.Minute, "the other job's end", func() bool {
		_, err := os.Stat(filepath.Join(shared, "done-"+other))
		return err == nil
	}, serve)
}

// crossRequests sends a request to every endpoint of table from a new
// endpoint of virtual network tag on the daemon at socket, and records
// why each came back.
func crossRequests(socket string, tag uint64, table []amii.Name, rep *report) error {
	x, err := amii.Dial(socket, amii.VNet{Tag: tag, Table: table}, amii.Config{})
	if err != nil {
		return fmt.Errorf("an endpoint for the other job's table: %w", err)
	}
	defer x.Close()
	x.OnReturn(func(r amii.Returned) { rep.Cross = append(rep.Cross, r.Reason.String()) })
	for i := range table {
		if err := x.Request(i, 0, uint64(i)); err != nil {
			return fmt.Errorf("request to the other job's rank %d: %w", i, err)
		}
	}
	return waitFor(30*time.Second, "the other job's returns", func() bool { return len(rep.Cross) == len(table) }, func() error {
		if _, err := x.Wait(10 * time.Millisecond); err != nil {
			return err
		}
		_, err := x.Poll()
		return err
	})
}

// writeAtomic writes a file whole: the other job never reads half of it.
func writeAtomic(path string, b []byte) error {
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
