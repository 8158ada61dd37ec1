// Package lint holds repository-wide checks that run as ordinary tests:
// every Go file is gofmt-formatted; imports between xam's layers point
// downward only (lint_test.go's layer: internal helpers and lab at rank 0;
// loader, afxdp and cells; datapath; driver and nicfw; am; bench; cmd and
// examples on top), and between the packages of one folder too (sublayer);
// and nothing outside bench but cmd/xam imports bench.
package lint
