//go:build linux

package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

const secretTag = 0x5ec7e7deadbeef

// snapshot is a daemon's snapshot with one endpoint, one peer and a
// module, its counters all different.
func snapshot() daemon.Stats {
	ep := nicfw.EndpointInfo{ID: 16, Tag: secretTag, Table: 1,
		Messages: nicfw.EndpointCounters{Sent: 4, SentBytes: 400, Received: 2, ReceivedBytes: 50},
		Queued:   [4]uint32{endpoint.RequestSend: 1, endpoint.RequestReceive: 3}}
	ep.Messages.Returned[endpoint.ReasonBadTag] = 1
	ep.Queues.Refused[endpoint.RefusedDestination] = 2
	ep.Queues.PutFull = 7
	peer := nicfw.PeerInfo{Host: 2, Transport: transport.PeerStats{Sent: 5, SentBytes: 600, Retransmits: 1,
		Delivered: 3, DeliveredBytes: 200, Refused: 1, Returned: 6, InFlight: 1}}
	peer.ReturnsSent[endpoint.ReasonNoEndpoint] = 2
	peer.Returned[0] = 8 // a reason out of range
	return daemon.Stats{
		Endpoints: 1, Connections: 1, Refused: 3, Sleeps: 5, Epoch: 9,
		List: []nicfw.EndpointInfo{ep}, Peers: []nicfw.PeerInfo{peer},
		Hosts:   []daemon.Host{{ID: 1, MAC: "02:00:00:00:00:01"}, {ID: 2, MAC: "02:00:00:00:00:02"}},
		Engine:  nicfw.EngineStats{Polls: 100, BusyPolls: 25, QueueFull: 3},
		Modules: []daemon.ModuleReport{{Name: "coord", ID: 2, Counters: []nicfw.ModuleCounter{{Name: "threshold_bytes", Value: -1}}}},
	}
}

func testSources() Sources {
	return Sources{
		Stats: func() (daemon.Stats, error) { return snapshot(), nil },
		XDP: func() (loader.Counters, error) {
			return loader.Counters{Received: 10, Redirected: 9, HECErrors: 4}, nil
		},
		Socket: func() (afxdp.Stats, error) {
			return afxdp.Stats{RxDropped: 2, RxFillRingEmptyDescs: 1, TxFrames: 5}, nil
		},
	}
}

// TestCollector: the collector turns a daemon's snapshot, its XDP
// program's counters and its socket's into metrics, per endpoint and per
// peer by label, reasons by name.
func TestCollector(t *testing.T) {
	c, err := New(testSources())
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP xam_endpoint_sent_messages_total Messages the endpoint sent that left (a bulk message once).
# TYPE xam_endpoint_sent_messages_total counter
xam_endpoint_sent_messages_total{endpoint="16"} 4
# HELP xam_endpoint_sent_bytes_total Data bytes of the messages the endpoint sent (medium and bulk messages; arguments and headers not counted).
# TYPE xam_endpoint_sent_bytes_total counter
xam_endpoint_sent_bytes_total{endpoint="16"} 400
# HELP xam_endpoint_received_bytes_total Data bytes of the messages the endpoint received.
# TYPE xam_endpoint_received_bytes_total counter
xam_endpoint_received_bytes_total{endpoint="16"} 50
# HELP xam_endpoint_queued_descriptors Descriptors waiting in the endpoint's queue: in a send queue for the engine, in a receive queue for the application.
# TYPE xam_endpoint_queued_descriptors gauge
xam_endpoint_queued_descriptors{endpoint="16",queue="reply_receive"} 0
xam_endpoint_queued_descriptors{endpoint="16",queue="reply_send"} 0
xam_endpoint_queued_descriptors{endpoint="16",queue="request_receive"} 3
xam_endpoint_queued_descriptors{endpoint="16",queue="request_send"} 1
# HELP xam_endpoint_receive_queue_full_total Puts that found one of the endpoint's receive queues full (the message was refused for now).
# TYPE xam_endpoint_receive_queue_full_total counter
xam_endpoint_receive_queue_full_total{endpoint="16"} 7
# HELP xam_peer_sent_bytes_total Payload bytes of the messages sent to the host (the engine's headers included).
# TYPE xam_peer_sent_bytes_total counter
xam_peer_sent_bytes_total{peer="2"} 600
# HELP xam_peer_retransmissions_total Messages sent to the host again (timer or NACK).
# TYPE xam_peer_retransmissions_total counter
xam_peer_retransmissions_total{peer="2"} 1
# HELP xam_peer_received_messages_total Messages from the host the engine accepted, each once.
# TYPE xam_peer_received_messages_total counter
xam_peer_received_messages_total{peer="2"} 3
# HELP xam_peer_messages_in_flight Messages to the host in flight now: the transport's send channels in use.
# TYPE xam_peer_messages_in_flight gauge
xam_peer_messages_in_flight{peer="2"} 1
# HELP xam_engine_polls_total Engine loops run: with xam_engine_busy_polls_total, the share of them that found work.
# TYPE xam_engine_polls_total counter
xam_engine_polls_total 100
# HELP xam_engine_busy_polls_total Engine loops that found work (sent, received, acknowledged or returned something).
# TYPE xam_engine_busy_polls_total counter
xam_engine_busy_polls_total 25
# HELP xam_engine_queue_full_total The engine's counter QueueFull (nicfw.EngineStats).
# TYPE xam_engine_queue_full_total counter
xam_engine_queue_full_total 3
# HELP xam_engine_sleeps_total Times the engine slept in poll(2), idle.
# TYPE xam_engine_sleeps_total counter
xam_engine_sleeps_total 5
# HELP xam_daemon_refused_requests_total Open requests, grants and connections the daemon refused (permissions, quotas, bad requests).
# TYPE xam_daemon_refused_requests_total counter
xam_daemon_refused_requests_total 3
# HELP xam_hosts Hosts in the host table, this one included.
# TYPE xam_hosts gauge
xam_hosts 2
# HELP xam_mapper_epoch The mapper's version of the host table (0: a static table, or none yet).
# TYPE xam_mapper_epoch gauge
xam_mapper_epoch 9
# HELP xam_module_value A module's setting or counter, as the module reports it (nicfw.StatsReporter).
# TYPE xam_module_value gauge
xam_module_value{module="coord",name="threshold_bytes"} -1
# HELP xam_xdp_redirected_total The XDP program's counter Redirected, summed over CPUs (loader.Counters).
# TYPE xam_xdp_redirected_total counter
xam_xdp_redirected_total 9
# HELP xam_xdp_hec_errors_total The XDP program's counter HECErrors, summed over CPUs (loader.Counters).
# TYPE xam_xdp_hec_errors_total counter
xam_xdp_hec_errors_total 4
# HELP xam_xsk_rx_dropped_total The AF_XDP socket's counter RxDropped, from the kernel's XDP_STATISTICS (afxdp.Stats).
# TYPE xam_xsk_rx_dropped_total counter
xam_xsk_rx_dropped_total 2
# HELP xam_xsk_rx_fill_ring_empty_descs_total The AF_XDP socket's counter RxFillRingEmptyDescs, from the kernel's XDP_STATISTICS (afxdp.Stats).
# TYPE xam_xsk_rx_fill_ring_empty_descs_total counter
xam_xsk_rx_fill_ring_empty_descs_total 1
# HELP xam_xsk_tx_frames_total The AF_XDP socket's counter TxFrames, counted in user space (afxdp.Stats).
# TYPE xam_xsk_tx_frames_total counter
xam_xsk_tx_frames_total 5
`
	names := []string{"xam_endpoint_sent_messages_total", "xam_endpoint_sent_bytes_total", "xam_endpoint_received_bytes_total",
		"xam_endpoint_queued_descriptors", "xam_endpoint_receive_queue_full_total",
		"xam_peer_sent_bytes_total", "xam_peer_retransmissions_total", "xam_peer_received_messages_total", "xam_peer_messages_in_flight",
		"xam_engine_polls_total", "xam_engine_busy_polls_total", "xam_engine_queue_full_total", "xam_engine_sleeps_total",
		"xam_daemon_refused_requests_total", "xam_hosts", "xam_mapper_epoch", "xam_module_value",
		"xam_xdp_redirected_total", "xam_xdp_hec_errors_total",
		"xam_xsk_rx_dropped_total", "xam_xsk_rx_fill_ring_empty_descs_total", "xam_xsk_tx_frames_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	text := format(t, c)
	for _, line := range []string{
		// Every reason the engine gives, at 0 too; out of range as
		// "other", and only once it counts.
		`xam_endpoint_returned_messages_total{endpoint="16",reason="bad_tag"} 1`,
		`xam_endpoint_returned_messages_total{endpoint="16",reason="no_handler"} 0`,
		`xam_endpoint_refused_descriptors_total{endpoint="16",reason="destination"} 2`,
		`xam_endpoint_refused_descriptors_total{endpoint="16",reason="flags"} 0`,
		`xam_peer_returns_sent_total{peer="2",reason="no_endpoint"} 2`,
		`xam_peer_returned_messages_total{peer="2",reason="other"} 8`,
		`xam_peer_given_up_total{peer="2"} 6`,
		`xam_peer_nacks_sent_total{peer="2"} 1`,
		`xam_transport_retransmits_total 0`,
		`xam_transport_frames_for_others_total 0`,
		`xam_residency_faults_total 0`,
		`xam_daemon_endpoints 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, text)
		}
	}
	for _, absent := range []string{`reason="other"} 0`, `reason="no_reply"`, fmt.Sprint(uint64(secretTag)), fmt.Sprintf("%x", secretTag), "xam_mapper_probes_sent_total"} {
		if strings.Contains(text, absent) {
			t.Errorf("the metrics hold %q:\n%s", absent, text)
		}
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// TestCollectorErrors: a source that fails is an error of the scrape, with
// its cause, and the other sources' metrics are still gathered; New
// refuses a collector with nothing to read.
func TestCollectorErrors(t *testing.T) {
	src := testSources()
	src.Stats = func() (daemon.Stats, error) { return daemon.Stats{}, daemon.ErrClosed }
	c, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "reading the daemon's statistics") {
		t.Errorf("gathering from a closed daemon: %v", err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "xam_xdp_redirected_total"
	}
	if !found {
		t.Errorf("the XDP program's counters are not gathered when the daemon's fail")
	}
	if _, err := New(Sources{}); !errors.Is(err, ErrNoStats) {
		t.Errorf("New without Stats: %v", err)
	}
}

// format returns all of c's metrics in the text format.
func format(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"QueueFull": "queue_full", "HECErrors": "hec_errors", "RxFillRingEmptyDescs": "rx_fill_ring_empty_descs",
		"AcksPiggybacked": "acks_piggybacked", "Sent": "sent", "BusyPolls": "busy_polls"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
