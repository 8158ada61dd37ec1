package cluster

import "testing"

// TestDaemonSocket: the job's daemon socket follows from the job id alone,
// and an id with bytes a path must not hold cannot leave /run/xam.
func TestDaemonSocket(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"4711", "/run/xam/job-4711.sock"},
		{"3f2a9c0d11e2b7a4", "/run/xam/job-3f2a9c0d11e2b7a4.sock"},
		{"../../etc/x y", "/run/xam/job-.._.._etc_x_y.sock"},
	} {
		if got := (&Job{JobID: tc.id}).DaemonSocket(); got != tc.want {
			t.Errorf("job %q: %q, want %q", tc.id, got, tc.want)
		}
	}
}
