package amii

// pendingRing holds the requests sent and neither answered nor returned,
// in the order sent: a ring of Config.Credits entries, so that the
// usual answer, to the oldest request to its destination, takes the
// entry at the head without moving the others (with a window of K
// requests in flight, removing from a slice's front moved K entries per
// reply).
type pendingRing struct {
	buf  []pendingRequest
	head int // the oldest entry
	n    int
}

func newPendingRing(size int) pendingRing { return pendingRing{buf: make([]pendingRequest, size)} }

// Len returns the number of entries.
func (r *pendingRing) Len() int { return r.n }

// at returns entry i, from the oldest.
func (r *pendingRing) at(i int) *pendingRequest {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

// push adds p as the newest entry. The ring grows if it is full: with
// Config.Shared, goroutines that waited for a medium slot after taking a
// credit may together hold more requests than credits.
func (r *pendingRing) push(p pendingRequest) {
	if r.n == len(r.buf) {
		buf := make([]pendingRequest, max(1, 2*len(r.buf)))
		for i := range r.n {
			buf[i] = *r.at(i)
		}
		r.buf, r.head = buf, 0
	}
	*r.at(r.n) = p
	r.n++
}

// remove removes entry i, moving the entries older than it, or those
// newer, whichever are fewer.
func (r *pendingRing) remove(i int) {
	if i < r.n-1-i {
		for k := i; k > 0; k-- {
			*r.at(k) = *r.at(k - 1)
		}
		if r.head++; r.head == len(r.buf) {
			r.head = 0
		}
	} else {
		for k := i; k < r.n-1; k++ {
			*r.at(k) = *r.at(k + 1)
		}
	}
	r.n--
}

// keep keeps the entries for which f returns true, in order.
func (r *pendingRing) keep(f func(p *pendingRequest) bool) {
	j := 0
	for i := range r.n {
		if p := r.at(i); f(p) {
			*r.at(j) = *p
			j++
		}
	}
	r.n = j
}
