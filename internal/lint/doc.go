// Package lint holds repository-wide checks that run as ordinary tests:
// every Go file is gofmt-formatted, and imports between xam's layers point
// downward only (DESIGN.md: loader, afxdp, cells at the bottom; driver and
// nicfw above them; am above those; bench and cmd on top).
package lint
