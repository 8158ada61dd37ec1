// Package testenv decides whether a test can run in the environment it finds,
// and what happens when it cannot.
//
// A test that lacks something it needs (root or capabilities, a kernel
// feature, a command) calls one of the Require functions or SkipOrFail. On a
// developer's machine the test then skips with the reason. Under CI (the
// environment variable CI is "true" or "1") it fails instead: the CI machines
// are set up to run every test, so a skip there means the set-up is broken, and
// a skip would hide that.
//
// The functions stop the test the way testing.TB does (Skipf and Fatalf call
// runtime.Goexit), so a caller never continues past a failed requirement.
package testenv
