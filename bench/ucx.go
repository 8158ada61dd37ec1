package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/xam-project/xam/datapath"
)

// UCX active messages over TCP are a peer of AM-II's figures: the
// ucx_perftest tool of Debian's ucx-utils (scripts/deps.sh installs it),
// run between the same two lab hosts as xam, its server on b and its
// client on a, UCX_TLS=tcp. Where the tool is missing, the peer says "not
// installed" rather than failing the experiment.

// ucxPerftest is the tool's name on $PATH.
const ucxPerftest = "ucx_perftest"

// ucxNotInstalled is the peer's note when the tool is missing.
const ucxNotInstalled = "not installed (Debian ucx-utils; scripts/deps.sh installs it)"

// ucxPort is the port of the tool's server in the lab host's namespace.
const ucxPort = 13337

// ucxResult is what ucx_perftest measured: for ucp_am_lat the round trip
// (twice the tool's one-way median), for ucp_am_bw the bandwidth.
type ucxResult struct {
	Test    string  `json:"test"` // ucp_am_lat, ucp_am_bw
	Size    int     `json:"message_bytes"`
	Iters   int     `json:"iterations"`
	RTT     float64 `json:"rtt_us,omitempty"`
	MBPerS  float64 `json:"mb_per_s,omitempty"` // 10^6 bytes per second
	Missing string  `json:"missing,omitempty"`
}

// Peer returns the result as a peer of a figure: its round trip for the
// latency test, its bandwidth for the bandwidth test.
func (u *ucxResult) Peer() Peer {
	name := fmt.Sprintf("UCX AM over TCP (%s, %d B)", u.Test, u.Size)
	if u.Missing != "" {
		return Peer{Name: name, Missing: u.Missing}
	}
	if u.Test == "ucp_am_lat" {
		return peer(name, u.RTT)
	}
	return peer(name, u.MBPerS)
}

// runUCX runs ucx_perftest's test (ucp_am_lat or ucp_am_bw) from a to b
// (address bAddr): iters messages of size bytes. A missing tool is not an
// error: the result says so.
func runUCX(a, b datapath.Place, bAddr netip.Addr, test string, size, iters int) (*ucxResult, error) {
	res := &ucxResult{Test: test, Size: size, Iters: iters}
	tool, err := exec.LookPath(ucxPerftest)
	if err != nil {
		res.Missing = ucxNotInstalled
		return res, nil
	}
	env := append(os.Environ(), "UCX_TLS=tcp", "UCX_WARN_UNUSED_ENV_VARS=n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var serverOut bytes.Buffer
	server := inNetns(ctx, tool, "-t", test, "-p", strconv.Itoa(ucxPort))
	server.Env, server.Stdout, server.Stderr = env, &serverOut, &serverOut
	// A process started on the namespace's thread is born in it.
	if err := b.Do(server.Start); err != nil {
		return nil, fmt.Errorf("ucx_perftest server: %w", err)
	}
	exited := make(chan struct{})
	go func() { server.Wait(); close(exited) }()
	defer func() {
		cancel()
		<-exited
	}()
	if err := b.Do(func() error { return awaitListen(ctx, ucxPort, exited) }); err != nil {
		cancel()
		<-exited // the server's output is complete
		return nil, fmt.Errorf("ucx_perftest server: %w: %s", err, lastLines(serverOut.String(), 5))
	}
	var out bytes.Buffer
	client := inNetns(ctx, tool, bAddr.String(), "-t", test, "-p", strconv.Itoa(ucxPort),
		"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	client.Env, client.Stdout, client.Stderr = env, &out, &out
	if err := a.Do(client.Start); err != nil {
		return nil, fmt.Errorf("ucx_perftest client: %w", err)
	}
	if err := client.Wait(); err != nil {
		return nil, fmt.Errorf("ucx_perftest client: %w: %s", err, lastLines(out.String(), 5))
	}
	final, err := ucxFinal(out.String())
	if err != nil {
		return nil, err
	}
	// Final: iterations, 50th percentile latency, average, overall (µs),
	// bandwidth average and overall (MiB/s), message rate average and
	// overall. The latency test's latency is half a round trip.
	switch test {
	case "ucp_am_lat":
		res.RTT = 2 * final[1]
	default:
		res.MBPerS = final[5] * (1 << 20) / 1e6
	}
	return res, nil
}

// inNetns returns the command that runs tool with args in the network
// namespace of the thread that starts it, with a /sys of that namespace:
// UCX finds its network devices in /sys/class/net, which shows the
// namespace that mounted /sys, not the thread's. The command mounts a
// sysfs of its own in a mount namespace of its own (unshare(1), private
// propagation), then runs the tool.
func inNetns(ctx context.Context, tool string, args ...string) *exec.Cmd {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return exec.CommandContext(ctx, tool, args...)
	}
	return exec.CommandContext(ctx, unshare, append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount -t sysfs sysfs /sys && exec "$0" "$@"`, tool}, args...)...)
}

// ucxFinal parses the numbers of ucx_perftest's "Final:" line.
func ucxFinal(out string) ([]float64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "Final:" {
			continue
		}
		var v []float64
		for _, s := range f[1:9] {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("ucx_perftest: %q in %q: %w", s, sc.Text(), err)
			}
			v = append(v, x)
		}
		return v, nil
	}
	return nil, fmt.Errorf("ucx_perftest: no Final line in its output: %s", lastLines(out, 5))
}

// awaitListen waits until a TCP socket of the calling thread's network
// namespace listens on port, the server exits, or ctx ends.
func awaitListen(ctx context.Context, port int, exited <-chan struct{}) error {
	want := fmt.Sprintf(":%04X ", port)
	for {
		b, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" { // 0A: LISTEN
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("exited before listening")
		case <-ctx.Done():
			return errors.New("not listening after 2 minutes")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
