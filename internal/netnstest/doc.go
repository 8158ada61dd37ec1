// Package netnstest gives privileged tests a private two-host network: two
// fresh network namespaces joined by a veth pair.
//
// # Model
//
// NewVethPair creates namespaces A and B, named under /run/netns like
// `ip netns add` does, puts one end of a veth pair in each, brings the veth
// and lo up in both, and by default gives the ends the IPv4 addresses
// 10.x.y.1/24 (A) and 10.x.y.2/24 (B), different for each of the first 65535
// pairs of the process. It returns once both ends report carrier (operstate up), so the
// first frame a test sends is not dropped. IPv6 is disabled on the veth ends
// unless asked for, so the link stays silent (no router solicitations, no MLD
// reports) and a test counting frames sees only its own.
//
// Everything is removed by the test's Cleanup, whether the test passes, fails
// or stops early (t.Fatal, t.FailNow, t.Skip): the veth is deleted (both ends
// go at once), the netlink sockets and namespace handles are closed and the
// names are unmounted and removed. A namespace lives on, nameless, while
// anything still refers to it: close the sockets made in it before the test
// ends (register their Close with t.Cleanup after NewVethPair, so that it runs
// first).
//
//	p := netnstest.NewVethPair(t, netnstest.WithQueues(4))
//	var conn *net.UDPConn
//	err := p.B.Do(func() (err error) { // a socket in B's namespace
//		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.B.Addr.Addr().AsSlice()})
//		return err
//	})
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { conn.Close() }) // runs before the pair's cleanup
//	// ... use conn from this goroutine; p.A.Netlink, p.A.Index, p.A.MAC
//	// describe A's end of the link.
//
// # Threads
//
// A network namespace belongs to an OS thread, and sockets belong to the
// namespace they were created in, for their whole life. Host.Do runs a
// function on a goroutine locked to its own thread, which it switches into
// the host's namespace and back afterwards; sockets created there are then
// used from any goroutine. A thread that cannot be switched back is never
// returned to the Go scheduler: its goroutine exits still locked, and the
// runtime ends the thread. No other goroutine of the process ever runs in a
// foreign namespace; the package's tests check that every thread is back in
// the original namespace at the end.
//
// # Names and leftovers
//
// Namespace names are "xamt-PID-TOKEN-N-a" and "...-b": the process id, a
// random token per process (against a recycled pid) and a counter. Interface
// names (at most 15 bytes) are "xPID-Na" and "xPID-Nb", N in hex. A test
// process that dies without running its cleanups (SIGKILL, a timeout's
// panic, a crash) leaves its namespaces behind; Sweep removes those whose pid
// no longer runs, and NewVethPair calls it once per process. Sweep judges
// liveness in its own pid namespace: test processes that share /run/netns
// must share the pid namespace too.
package netnstest
