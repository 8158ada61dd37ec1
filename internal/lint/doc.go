// Package lint holds repository-wide checks that run as ordinary tests:
// every Go file is gofmt-formatted; imports between xam's layers point
// downward only (lint_test.go's layer: internal helpers and lab at rank 0;
// loader, afxdp and cells; datapath; driver and nicfw; am; bench; cmd and
// examples on top), and between the packages of one folder too (sublayer);
// nothing outside bench but cmd/xam imports bench; no hand-written
// non-test file is over 800 lines, no function over 120; and system calls
// stay in the packages whose job they are (TestSyscallBoundary).
package lint
