package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// scrape gets the metrics at url and parses them.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s\n%s", url, err, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
	return fams
}

// metricValue returns the value of metric name with the labels given as
// name, value pairs, and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := fams[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// TestFwMetrics runs two `xam fw --metrics 127.0.0.1:0` daemons on a lab,
// as a user does, sends AM-II requests with medium data from one host's
// endpoint to the other's, answered with medium replies, and scrapes both
// daemons' /metrics over HTTP: each endpoint's messages and bytes, and
// each daemon's messages and bytes per peer, are what went between them;
// the XDP program's and the socket's counters (XDP_STATISTICS) are there,
// and the Go runtime's and the process's. Before it, a busy metrics
// address is refused before the daemon touches its device or makes its
// socket.
func TestFwMetrics(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwmetrics%d", os.Getpid()), Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	ha, hb := l.Hosts[0], l.Hosts[1]
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	fwArgs := func(id int, h, peer *lab.Host, sock, metrics string) []string {
		return []string{"fw", "--dev", h.Link, "--netns", h.NS, "--id", fmt.Sprint(id), "--host", fmt.Sprintf("%d=%s", 3-id, peer.MAC),
			"--socket", sock, "--sleep", "1ms", "--metrics", metrics}
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	code, _, errs := xam(t, nil, fwArgs(1, ha, hb, sa, busy.Addr().String())...)
	if want := fmt.Sprintf("xam fw: --metrics %s: bind: address already in use\n", busy.Addr()); code != 1 || errs != want {
		t.Errorf("xam fw with a busy metrics address: exit %d, %q; want 1 and %q", code, errs, want)
	}
	if _, err := os.Stat(sa); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon's socket after a busy metrics address: %v", err)
	}
	if err := ha.Do(func() error { _, err := loader.CountersOn(ha.Index); return err }); !errors.Is(err, loader.ErrNotXam) {
		t.Errorf("xam's XDP program on %s after a busy metrics address: %v", ha.Link, err)
	}

	var cmds []*exec.Cmd
	start := func(args []string) string {
		cmd, _, stderr := xamProcess(t, args...)
		cmds = append(cmds, cmd)
		seen := waitLine(t, stderr, "xam fw: metrics at http://")
		go func() {
			for stderr.Scan() {
			}
		}()
		url := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/metrics`).FindString(seen)
		if url == "" || strings.HasSuffix(url, ":0/metrics") {
			t.Fatalf("no metrics address in:\n%s", seen)
		}
		return url
	}
	urlA, urlB := start(fwArgs(1, ha, hb, sa, "127.0.0.1:0")), start(fwArgs(2, hb, ha, sb, "127.0.0.1:0"))

	const count, reqSize, replySize = 50, 300, 100
	server, tag, err := amii.DialNew(sb, amii.VNet{ID: 20, Table: []amii.Name{{Host: 1, Endpoint: 21}}}, amii.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := amii.Dial(sa, amii.VNet{ID: 21, Tag: tag, Table: []amii.Name{{Host: 2, Endpoint: 20}}}, amii.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var replies atomic.Int64
	reply := client.RegisterMedium(func(_ *amii.Token, _ []uint64, data []byte) {
		if len(data) == replySize {
			replies.Add(1)
		}
	})
	echo := server.RegisterMedium(func(tok *amii.Token, _ []uint64, data []byte) {
		if err := tok.ReplyMedium(reply, make([]byte, replySize), uint64(len(data))); err != nil {
			t.Error(err)
		}
	})
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			server.Wait(10 * time.Millisecond)
			server.Poll()
		}
	}()
	for range count {
		if err := client.RequestMedium(0, echo, make([]byte, reqSize)); err != nil {
			t.Fatal(err)
		}
	}
	err = client.Drain(60 * time.Second)
	stop.Store(true)
	<-done
	if err != nil || replies.Load() != count {
		t.Fatalf("%d replies of %d bytes, want %d: %v", replies.Load(), replySize, count, err)
	}

	// Everything was counted before the client saw its last reply.
	ma, mb := scrape(t, urlA), scrape(t, urlB)
	for _, c := range []struct {
		m           map[string]*dto.MetricFamily
		name, label string
		want        float64
	}{
		{ma, "xam_endpoint_sent_messages_total", "21", count},
		{ma, "xam_endpoint_sent_bytes_total", "21", count * reqSize},
		{ma, "xam_endpoint_received_messages_total", "21", count},
		{ma, "xam_endpoint_received_bytes_total", "21", count * replySize},
		{mb, "xam_endpoint_received_messages_total", "20", count},
		{mb, "xam_endpoint_received_bytes_total", "20", count * reqSize},
		{mb, "xam_endpoint_sent_messages_total", "20", count},
		{mb, "xam_endpoint_sent_bytes_total", "20", count * replySize},
		{ma, "xam_endpoint_returned_messages_total", "21", 0},
		{ma, "xam_endpoint_queued_descriptors", "21", 0},
	} {
		if got, ok := metricValue(c.m, c.name, "endpoint", c.label); !ok || got != c.want {
			t.Errorf("%s{endpoint=%q} = %v (present: %v), want %v", c.name, c.label, got, ok, c.want)
		}
	}
	// Per peer: what one daemon sent the other received, message for
	// message and byte for byte; the bytes are the engine's messages,
	// the data and a header of the same size each.
	for _, dir := range []struct {
		from, to         map[string]*dto.MetricFamily
		fromPeer, toPeer string
		data             float64
	}{{ma, mb, "2", "1", reqSize}, {mb, ma, "1", "2", replySize}} {
		sent, _ := metricValue(dir.from, "xam_peer_sent_messages_total", "peer", dir.fromPeer)
		got, _ := metricValue(dir.to, "xam_peer_received_messages_total", "peer", dir.toPeer)
		sentBytes, _ := metricValue(dir.from, "xam_peer_sent_bytes_total", "peer", dir.fromPeer)
		gotBytes, _ := metricValue(dir.to, "xam_peer_received_bytes_total", "peer", dir.toPeer)
		perMsg := sentBytes / count
		t.Logf("host %s to %s: %v messages, %v bytes sent, %v received", dir.toPeer, dir.fromPeer, sent, sentBytes, gotBytes)
		if sent != count || got != count || sentBytes != gotBytes || perMsg != float64(int(perMsg)) || perMsg <= dir.data || perMsg > dir.data+128 {
			t.Errorf("host %s to %s: %v messages sent, %v received, %v bytes sent, %v received; want %d, and the same bytes, %v and a header a message",
				dir.toPeer, dir.fromPeer, sent, got, sentBytes, gotBytes, count, dir.data)
		}
	}
	for name, min := range map[string]float64{
		"xam_xdp_redirected_total": count, "xam_xsk_rx_frames_total": count, "xam_xsk_rx_dropped_total": 0,
		"xam_xsk_rx_ring_full_total": 0, "xam_xsk_rx_fill_ring_empty_descs_total": 0, "xam_xsk_tx_ring_empty_descs_total": 0,
		"xam_engine_polls_total": 1, "xam_engine_busy_polls_total": 1, "xam_daemon_endpoints": 1, "xam_daemon_connections": 1, "xam_hosts": 2,
		"go_goroutines": 1, "process_cpu_seconds_total": 0,
	} {
		if got, ok := metricValue(ma, name); !ok || got < min {
			t.Errorf("%s = %v (present: %v), want at least %v", name, got, ok, min)
		}
	}
	polls, _ := metricValue(ma, "xam_engine_polls_total")
	if busy, _ := metricValue(ma, "xam_engine_busy_polls_total"); busy > polls {
		t.Errorf("%v busy polls of %v", busy, polls)
	}

	// SIGTERM ends the daemons cleanly, and their metrics with them.
	for _, cmd := range cmds {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("xam fw after SIGTERM: %v, want exit 0", err)
		}
	}
	if resp, err := http.Get(urlA); err == nil {
		resp.Body.Close()
		t.Errorf("the metrics are still served after the daemon ended: %s", resp.Status)
	}
}
