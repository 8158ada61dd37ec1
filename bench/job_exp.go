package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/job"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// The experiments of RunJob, in the report's order.
func jobExperiments() []jobExperiment {
	return []jobExperiment{
		{name: "job-rtt", title: "Round trips between two nodes",
			measured: "SSAM: 32 µs round trips over 140 Mb/s ATM; AM-II: 42 µs over Myrinet; GRIM: 13 µs",
			differs:  "ranks 0 and 1 of the job, each on its node's device; one request and its reply at a time, AM-II, SSAM and GRIM inline (the task runs the engine), kernel UDP and TCP between the same devices' addresses",
			run:      (*jobRun).roundTrips},
		{name: "job-bandwidth", title: "Bandwidth between two nodes",
			measured: "AM-II: 31 MB/s node to node over Myrinet; SSAM: 14.3 MB/s",
			differs:  "AM-II bulk Stores of 64 KB from rank 0 to rank 1, 16 in flight; kernel TCP streams the same bytes in 64 KB writes between the same devices",
			run:      (*jobRun).bandwidth},
		{name: "job-logp", title: "LogP between two nodes",
			measured: "AM-II's LogP parameters (Os, Or, g, L) and round trip of a short message, each layer's increment: 42 µs round trip",
			differs:  "rank 0 the sender, rank 1 the receiver, inline engines in the configurations of `xam bench logp`; the receiver's Or includes its engine's run that sends the replies",
			run:      (*jobRun).logp},
		{name: "job-permutations", title: "Permutations over all nodes",
			measured: "AM-II: every node sends to one other at once (neighbour shift, half the machine away, a random permutation); the aggregate bandwidth",
			differs:  "every rank Stores to its destination at once; the aggregate is every rank's bytes over the slowest rank's time",
			run:      (*jobRun).permutations},
		{name: "job-clients", title: "n clients to one server",
			measured: "AM-II's LogP contention: n clients' short requests to one server, against one client alone",
			differs:  "every rank but 0 sends short requests to rank 0 (16 in flight each), then rank 1 alone, in the same run",
			run:      (*jobRun).clients},
		{name: "job-incast", title: "Incast n to 1",
			measured: "DVCM: n senders to one receiver, sender coordination off and on",
			differs:  "every rank but 0 Stores to rank 0 at once, with sender coordination off, then on (the coordination module, nicfw/coord, in each sender's inline engine, told neither the link's rate nor the switch's buffer); kernel TCP streams from the same senders at once beside them",
			run:      (*jobRun).incast},
	}
}

// jobRow is one measured value of a job experiment's run.
type jobRow struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// jobResult is a job experiment's run: its rows and figures.
type jobResult struct {
	Rows []jobRow `json:"rows"`
	figs []Figure
}

func (r *jobResult) add(what, unit string, v float64) { r.Rows = append(r.Rows, jobRow{what, v, unit}) }

// Markdown writes the rows.
func (r *jobResult) Markdown(w io.Writer) error {
	fmt.Fprintf(w, "| measured | value | unit |\n|---|--:|---|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", row.What, num(row.Value), row.Unit)
	}
	return nil
}

// Figures returns the run's figures.
func (r *jobResult) Figures() []Figure { return r.figs }
func (r *jobResult) charts() []chart   { return nil }

// jobFig is a figure of a job experiment, which no paper measured as such.
func jobFig(name, unit string, v float64, peers ...Peer) Figure {
	return noteFig(name, unit, "—", v, peers...)
}

// Sizes of the job experiments.
func (x *jobRun) pick(quick, full int) int {
	if x.cfg.Quick {
		return quick
	}
	return full
}

const jobStore = 64 << 10 // the bytes of a bandwidth Store

// amiiSession is an AM-II endpoint of the job with the experiments'
// handlers: echo (replies with its argument), pong (notes it), sink (a
// Store's handler, answered for it).
type amiiSession struct {
	*job.AMII
	echo, pong, sink, nop, done amii.HandlerID
	last                        uint64 // the last pong's argument
	dones                       int    // done messages not yet counted by finish
	returned                    error
}

// idleAfter is how long finish polls without work before it sleeps
// idleSleep between polls.
const (
	idleAfter = time.Millisecond
	idleSleep = 200 * time.Microsecond
)

// finish says this rank is done to every other, and serves its endpoint
// without sleeping until every other has said so too, and quiet says
// every request of this rank's (its done messages too) was answered: a
// rank that only answers (the other end of a ping, the receiver of
// Stores) answers at once, which a barrier's idle poll would not, and no
// rank leaves a request queued behind one in flight when it stops
// polling.
func (x *jobRun) finish(send func(r int) error, poll func() (int, error), quiet func() bool, dones *int) error {
	for r := range x.j.Size {
		if r != x.j.Rank {
			if err := send(r); err != nil {
				return fmt.Errorf("telling rank %d this one is done: %w", r, err)
			}
		}
	}
	want := x.j.Size - 1
	deadline := time.Now().Add(2 * time.Minute)
	busy := time.Now()
	for i := 0; *dones < want || !quiet(); i++ {
		n, err := poll()
		if err != nil {
			return err
		}
		// A rank with nothing to do leaves the processor, and one idle
		// for a while sleeps: ranks that share a machine's processors (a
		// lab, or the tasks of a small cluster's nodes) leave them to the
		// ranks that measure. Slurm starts each task in a session of its
		// own, and a yield does not leave the processor to another
		// session's threads where the kernel groups them (autogroup).
		switch {
		case n > 0:
			busy = time.Now()
		case time.Since(busy) > idleAfter:
			time.Sleep(idleSleep)
		default:
			endpoint.Yield()
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("%d of the %d other ranks said they were done within 2 minutes", *dones, want)
		}
	}
	*dones -= want
	return nil
}

// finish is jobRun.finish on the AM-II endpoint.
func (s *amiiSession) finish(x *jobRun) error {
	return x.finish(func(r int) error { return s.Request(r, s.done) }, s.poll, func() bool { return s.Outstanding() == 0 }, &s.dones)
}

func (s *amiiSession) poll() (int, error) {
	n, err := s.Poll()
	if err == nil {
		err = s.returned
	}
	return n, err
}

// openAMII opens the job's AM-II endpoint on every rank.
func (x *jobRun) openAMII() (*amiiSession, error) { return x.openAMIIWith(nil) }

// openAMIIWith opens the job's AM-II endpoint on every rank, its inline
// engine with the modules mods returns (nil: none).
func (x *jobRun) openAMIIWith(mods func() []nicfw.Module) (*amiiSession, error) {
	s := &amiiSession{}
	cfg := job.Config{Mode: job.Inline, Device: x.cfg.Device, XDP: x.cfg.XDP,
		AMII: amii.Config{Credits: 16, StagingSize: 4 << 20, GiveUp: 30 * time.Second}}
	cfg.Engine.Window = 16
	if mods != nil {
		cfg.Engine.Modules = mods()
	}
	cfg.SetupAMII = func(a *job.AMII) error {
		s.AMII = a
		s.echo = a.Register(func(t *amii.Token, args []uint64) { t.Reply(s.pong, args...) }) //nolint:errcheck // a missing reply is seen by the pinger
		s.pong = a.Register(func(_ *amii.Token, args []uint64) { s.last = args[0] })
		s.sink = a.RegisterMedium(func(*amii.Token, []uint64, []byte) {})
		s.nop = a.Register(func(*amii.Token, []uint64) {})
		s.done = a.Register(func(*amii.Token, []uint64) { s.dones++ })
		a.OnReturn(func(r amii.Returned) {
			if s.returned == nil {
				s.returned = fmt.Errorf("a message came back: %v", r)
			}
		})
		return nil
	}
	if _, err := job.OpenAMII(x.ctx, x.j, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// drain polls until every request is answered, for at most a minute.
func (s *amiiSession) drain() error {
	deadline := time.Now().Add(time.Minute)
	for i := 0; s.Outstanding() > 0; i++ {
		if _, err := s.Poll(); err != nil {
			return err
		}
		if s.returned != nil {
			return s.returned
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("%d requests unanswered after a minute", s.Outstanding())
		}
	}
	return s.returned
}

// stores sends total bytes to rank dst in Stores of jobStore bytes and
// waits until every one is answered; it returns the time taken.
func (s *amiiSession) stores(dst int, total int) (time.Duration, error) {
	t0 := time.Now()
	for sent := 0; sent < total; sent += jobStore {
		if err := s.Store(amii.Bulk{Dest: dst, Local: 0, Remote: 0, Length: jobStore, Handler: s.sink}); err != nil {
			return 0, err
		}
		if s.returned != nil {
			return 0, s.returned
		}
	}
	err := s.drain()
	return time.Since(t0), err
}

// requests sends n short requests to rank dst, as many in flight as the
// credits allow, and waits for every answer.
func (s *amiiSession) requests(dst, n int) (time.Duration, error) {
	t0 := time.Now()
	for i := range n {
		if err := s.Request(dst, s.nop, uint64(i)); err != nil {
			return 0, err
		}
	}
	err := s.drain()
	return time.Since(t0), err
}

// bandwidth: AM-II Stores from rank 0 to rank 1, then kernel TCP.
func (x *jobRun) bandwidth() (Reported, error) {
	total := x.pick(8<<20, 64<<20)
	s, err := x.openAMII()
	if err != nil {
		return nil, err
	}
	var took time.Duration
	if x.j.Rank == 0 {
		took, err = s.stores(1, total)
	}
	err = x.closeAMII(s, err)
	if err != nil {
		return nil, err
	}
	tcp, err := x.tcpStream(total)
	if err != nil || x.j.Rank != 0 {
		return nil, err
	}
	r := &jobResult{}
	mb := float64(total) / took.Seconds() / 1e6
	r.add("AM-II 64 KB Stores, rank 0 to rank 1", "MB/s", mb)
	r.add("kernel TCP, 64 KB writes", "MB/s", tcp)
	r.figs = []Figure{jobFig("AM-II 64 KB Stores, node to node", "MB/s", mb, peer("kernel TCP, 64 KB writes", tcp))}
	return r, nil
}

// closeAMII ends an AM-II phase: a barrier (every rank serves its
// endpoint until all are done), then the endpoint closes. err is the
// phase's error so far.
func (x *jobRun) closeAMII(s *amiiSession, err error) error {
	if err == nil {
		err = s.finish(x)
	}
	if berr := s.Barrier(x.ctx); err == nil && berr != nil {
		err = fmt.Errorf("the barrier: %w", berr)
	}
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// permutations: every rank Stores to its destination under three
// permutations at once.
func (x *jobRun) permutations() (Reported, error) {
	n := x.j.Size
	per := x.pick(4<<20, 32<<20)
	seed, err := x.gather("seed", float64(rand.Uint32()))
	if err != nil {
		return nil, err
	}
	perms := []struct {
		name string
		dst  []int
	}{
		{"neighbour shift (i to i+1)", shifted(n, 1)},
		{"half the machine away (i to i+n/2)", shifted(n, max(1, n/2))},
		{"a random permutation", derangement(n, uint64(seed[0]))},
	}
	if x.j.Rank != 0 {
		seed = nil
	}
	s, err := x.openAMII()
	if err != nil {
		return nil, err
	}
	r := &jobResult{}
	for _, p := range perms {
		if err = s.Barrier(x.ctx); err != nil {
			break
		}
		var took time.Duration
		if took, err = s.stores(p.dst[x.j.Rank], per); err != nil {
			break
		}
		var times []float64
		if times, err = x.gatherServing(s, "perm", took.Seconds()); err != nil {
			break
		}
		agg := float64(n*per) / slices.Max(times) / 1e6
		r.add(p.name+", aggregate", "MB/s", agg)
		r.figs = append(r.figs, jobFig(p.name+", aggregate of "+fmt.Sprint(n)+" nodes", "MB/s", agg))
	}
	err = x.closeAMII(s, err)
	if err != nil || x.j.Rank != 0 {
		return nil, err
	}
	return r, nil
}

// gatherServing is gather while the endpoint is served: a rank done
// early answers the others' requests until all are (finish).
func (x *jobRun) gatherServing(s *amiiSession, what string, v float64) ([]float64, error) {
	return x.gatherWith(what, v, func() error {
		if err := s.finish(x); err != nil {
			return err
		}
		return s.Barrier(x.ctx)
	})
}

// shifted is the permutation i → i+k mod n.
func shifted(n, k int) []int {
	d := make([]int, n)
	for i := range d {
		d[i] = (i + k) % n
	}
	return d
}

// derangement is a random permutation of n with no fixed point, drawn
// from seed (every rank draws the same).
func derangement(n int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	for {
		d := rng.Perm(n)
		if noFixed(d) {
			return d
		}
	}
}

func noFixed(d []int) bool {
	for i, v := range d {
		if i == v {
			return false
		}
	}
	return true
}

// clients: every rank but 0 sends short requests to rank 0 at once, then
// rank 1 alone.
func (x *jobRun) clients() (Reported, error) {
	per := x.pick(20_000, 200_000)
	s, err := x.openAMII()
	if err != nil {
		return nil, err
	}
	var all, one []float64
	phase := func(sends bool) ([]float64, error) {
		if err := s.Barrier(x.ctx); err != nil {
			return nil, err
		}
		var took time.Duration
		if sends {
			var err error
			if took, err = s.requests(0, per); err != nil {
				return nil, err
			}
		}
		return x.gatherServing(s, "clients", took.Seconds())
	}
	if all, err = phase(x.j.Rank != 0); err == nil {
		one, err = phase(x.j.Rank == 1)
	}
	err = x.closeAMII(s, err)
	if err != nil || x.j.Rank != 0 {
		return nil, err
	}
	n := x.j.Size - 1
	aggAll := float64(n*per) / slices.Max(all[1:])
	aggOne := float64(per) / one[1]
	r := &jobResult{}
	r.add(fmt.Sprintf("%d clients, aggregate", n), "requests/s", aggAll)
	r.add("one client", "requests/s", aggOne)
	r.figs = []Figure{jobFig(fmt.Sprintf("%d clients to one server, aggregate", n), "requests/s", aggAll, peer("one client", aggOne))}
	return r, nil
}

// incast: every rank but 0 Stores to rank 0 at once, coordination off,
// then on; then kernel TCP streams from the same ranks at once.
func (x *jobRun) incast() (Reported, error) {
	per := x.pick(4<<20, 32<<20)
	off, err := x.incastPhase(per, false)
	if err != nil {
		return nil, fmt.Errorf("coordination off: %w", err)
	}
	on, err := x.incastPhase(per, true)
	if err != nil {
		return nil, fmt.Errorf("coordination on: %w", err)
	}
	tcp, err := x.tcpIncast(per)
	if err != nil || x.j.Rank != 0 {
		return nil, err
	}
	n := x.j.Size - 1
	r := &jobResult{}
	r.add(fmt.Sprintf("AM-II Stores, %d to 1, coordination off, aggregate", n), "MB/s", off)
	r.add(fmt.Sprintf("AM-II Stores, %d to 1, coordination on, aggregate", n), "MB/s", on)
	r.add(fmt.Sprintf("kernel TCP, %d to 1, aggregate", n), "MB/s", tcp)
	tcpPeer := peer(fmt.Sprintf("kernel TCP %d to 1", n), tcp)
	r.figs = []Figure{
		jobFig(fmt.Sprintf("AM-II Stores %d to 1, coordination off, aggregate", n), "MB/s", off, tcpPeer),
		jobFig(fmt.Sprintf("AM-II Stores %d to 1, coordination on, aggregate", n), "MB/s", on, tcpPeer, peer("coordination off", off)),
	}
	return r, nil
}

// incastPhase runs one incast of per bytes from every rank but 0, the
// senders' engines with the coordination module if coordinated, and
// returns the aggregate MB/s (at rank 0).
func (x *jobRun) incastPhase(per int, coordinated bool) (float64, error) {
	var mods func() []nicfw.Module
	if coordinated && x.j.Rank != 0 {
		mods = func() []nicfw.Module { return []nicfw.Module{coord.New(coord.Config{})} }
	}
	s, err := x.openAMIIWith(mods)
	if err != nil {
		return 0, err
	}
	var times []float64
	if err = s.Barrier(x.ctx); err == nil {
		var took time.Duration
		if x.j.Rank != 0 {
			took, err = s.stores(0, per)
		}
		if err == nil {
			times, err = x.gatherServing(s, "incast", took.Seconds())
		}
	}
	if err = x.closeAMII(s, err); err != nil || x.j.Rank != 0 {
		return 0, err
	}
	return float64((x.j.Size-1)*per) / slices.Max(times[1:]) / 1e6, nil
}
