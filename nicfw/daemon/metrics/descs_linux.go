//go:build linux

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// The metrics named here, per endpoint, per peer host and of the daemon.

// counter and gauge send one metric of desc.
func counter(ch chan<- prometheus.Metric, desc *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, desc *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
}

// endpointDescs are the metrics of an endpoint (label endpoint).
type endpointDescs struct {
	sent, sentBytes, received, receivedBytes, returned, refused, queued, full *prometheus.Desc
}

func newEndpointDescs() endpointDescs {
	ep := []string{"endpoint"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("xam_endpoint_"+name, help, append(ep, labels...), nil)
	}
	return endpointDescs{
		sent:          d("sent_messages_total", "Messages the endpoint sent that left (a bulk message once)."),
		sentBytes:     d("sent_bytes_total", "Data bytes of the messages the endpoint sent (medium and bulk messages; arguments and headers not counted)."),
		received:      d("received_messages_total", "Messages put into the endpoint's receive queues (a bulk message once whole; returns not counted)."),
		receivedBytes: d("received_bytes_total", "Data bytes of the messages the endpoint received."),
		returned:      d("returned_messages_total", "Messages of the endpoint that came back to it, by reason.", "reason"),
		refused:       d("refused_descriptors_total", "Descriptors of the endpoint's send queues that the engine refused, by reason.", "reason"),
		queued:        d("queued_descriptors", "Descriptors waiting in the endpoint's queue: in a send queue for the engine, in a receive queue for the application.", "queue"),
		full:          d("receive_queue_full_total", "Puts that found one of the endpoint's receive queues full (the message was refused for now)."),
	}
}

func (e *endpointDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{e.sent, e.sentBytes, e.received, e.receivedBytes, e.returned, e.refused, e.queued, e.full} {
		ch <- d
	}
}

func (e *endpointDescs) collect(ch chan<- prometheus.Metric, info *nicfw.EndpointInfo) {
	ep, m := id(info.ID), &info.Messages
	counter(ch, e.sent, m.Sent, ep)
	counter(ch, e.sentBytes, m.SentBytes, ep)
	counter(ch, e.received, m.Received, ep)
	counter(ch, e.receivedBytes, m.ReceivedBytes, ep)
	sendReasons(ch, e.returned, &m.Returned, ep)
	for r, n := range info.Queues.Refused {
		counter(ch, e.refused, n, ep, refusalLabels[r])
	}
	for q, n := range info.Queued {
		gauge(ch, e.queued, float64(n), ep, queueLabels[q])
	}
	counter(ch, e.full, info.Queues.PutFull, ep)
}

// peerDescs are the metrics of a peer host (label peer).
type peerDescs struct {
	sent, sentBytes, retransmits, received, receivedBytes, nacks, givenUp, inFlight, returnsSent, returned *prometheus.Desc
}

func newPeerDescs() peerDescs {
	peer := []string{"peer"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("xam_peer_"+name, help, append(peer, labels...), nil)
	}
	return peerDescs{
		sent:          d("sent_messages_total", "Messages the transport sent to the host, each once however often it was sent (the engine's: a bulk message's chunks each, returns and control messages too)."),
		sentBytes:     d("sent_bytes_total", "Payload bytes of the messages sent to the host (the engine's headers included)."),
		retransmits:   d("retransmissions_total", "Messages sent to the host again (timer or NACK)."),
		received:      d("received_messages_total", "Messages from the host the engine accepted, each once."),
		receivedBytes: d("received_bytes_total", "Payload bytes of the messages received from the host."),
		nacks:         d("nacks_sent_total", "Messages from the host refused for now (NACKed): a full receive queue or pool, no frame free."),
		givenUp:       d("given_up_total", "Messages to the host the transport gave up on (unreachable, or the host restarted)."),
		inFlight:      d("messages_in_flight", "Messages to the host in flight now: the transport's send channels in use."),
		returnsSent:   d("returns_sent_total", "Messages from the host that this host returned to their senders, by reason.", "reason"),
		returned:      d("returned_messages_total", "Messages to the host that came back to their senders here, returned by it or given up on, by reason.", "reason"),
	}
}

func (p *peerDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.sent, p.sentBytes, p.retransmits, p.received, p.receivedBytes, p.nacks, p.givenUp, p.inFlight, p.returnsSent, p.returned} {
		ch <- d
	}
}

func (p *peerDescs) collect(ch chan<- prometheus.Metric, info *nicfw.PeerInfo) {
	h, t := id(info.Host), &info.Transport
	counter(ch, p.sent, t.Sent, h)
	counter(ch, p.sentBytes, t.SentBytes, h)
	counter(ch, p.retransmits, t.Retransmits, h)
	counter(ch, p.received, t.Delivered, h)
	counter(ch, p.receivedBytes, t.DeliveredBytes, h)
	counter(ch, p.nacks, t.Refused, h)
	counter(ch, p.givenUp, t.Returned, h)
	gauge(ch, p.inFlight, float64(t.InFlight), h)
	sendReasons(ch, p.returnsSent, &info.ReturnsSent, h)
	sendReasons(ch, p.returned, &info.Returned, h)
}

// daemonDescs are the daemon's own metrics.
type daemonDescs struct {
	endpoints, connections, refused, released, sleeps, hosts, epoch, module *prometheus.Desc
}

func newDaemonDescs() daemonDescs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return daemonDescs{
		endpoints:   d("xam_daemon_endpoints", "Endpoints open."),
		connections: d("xam_daemon_connections", "Applications connected to the daemon's socket."),
		refused:     d("xam_daemon_refused_requests_total", "Open requests, grants and connections the daemon refused (permissions, quotas, bad requests)."),
		released:    d("xam_daemon_large_endpoints_released_total", "Large endpoints (16 MB and up) whose memory was released off the engine's path."),
		sleeps:      d("xam_engine_sleeps_total", "Times the engine slept in poll(2), idle."),
		hosts:       d("xam_hosts", "Hosts in the host table, this one included."),
		epoch:       d("xam_mapper_epoch", "The mapper's version of the host table (0: a static table, or none yet)."),
		module:      d("xam_module_value", "A module's setting or counter, as the module reports it (nicfw.StatsReporter).", "module", "name"),
	}
}

func (d *daemonDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.endpoints, d.connections, d.refused, d.released, d.sleeps, d.hosts, d.epoch, d.module} {
		ch <- x
	}
}

func (d *daemonDescs) collect(ch chan<- prometheus.Metric, s *daemon.Stats) {
	gauge(ch, d.endpoints, float64(s.Endpoints))
	gauge(ch, d.connections, float64(s.Connections))
	counter(ch, d.refused, s.Refused)
	counter(ch, d.released, s.BigReleased)
	counter(ch, d.sleeps, s.Sleeps)
	gauge(ch, d.hosts, float64(len(s.Hosts)))
	gauge(ch, d.epoch, float64(s.Epoch))
}
