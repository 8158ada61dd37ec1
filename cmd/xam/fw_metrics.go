package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xam-project/xam/nicfw/daemon/metrics"
)

// `xam fw --metrics ADDR` serves the daemon's metrics (package
// nicfw/daemon/metrics), the Go runtime's and the process's at
// http://ADDR/metrics, for Prometheus. The address is checked with the
// other flags and listened on before the device is touched, so that a
// bad or busy address leaves nothing behind.

// hostName is what --metrics takes as a host that is not an IP address.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// checkMetricsAddr checks --metrics's HOST:PORT (HOST an IP address, a
// name or empty for every address; PORT 0..65535, 0 for any free one).
func checkMetricsAddr(addr string) error {
	bad := usageError("--metrics %q: want HOST:PORT or :PORT, e.g. 127.0.0.1:9464 or :9464", addr)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bad
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad
	}
	if _, err := netip.ParseAddr(host); err != nil && host != "" && !hostName.MatchString(host) {
		return bad
	}
	return nil
}

// listenMetrics listens on --metrics's address.
func listenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err // "bind: address already in use", without Go's "listen tcp"
		}
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	return ln, nil
}

// metricsServer returns a server of src's metrics with the Go runtime's
// and the process's at /metrics, its own registry; scrape errors are
// logged on stderr.
func metricsServer(src metrics.Sources, stderr io.Writer) (*http.Server, error) {
	col, err := metrics.New(src)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            log.New(stderr, "xam fw: metrics: ", 0),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(stderr, "xam fw: metrics: ", 0)}, nil
}
