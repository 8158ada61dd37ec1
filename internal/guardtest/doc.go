// Package guardtest gives tests of code that reads memory by hand
// (assembly, unsafe loads) a page with no access on either side of it.
//
// # Model
//
// Page maps three pages, makes the first and the last inaccessible and
// returns the middle one, filled with bytes from a seeded generator: an
// input placed flush against either end of it (page[:n], page[len-n:])
// makes a read before its first byte or after its last fault at once,
// which a test of the result alone would miss when the bytes beyond
// happen not to matter. The mapping is removed by the test's Cleanup.
package guardtest
