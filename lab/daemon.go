package lab

import "time"

// DaemonGrace is how long StopDaemons waits for a daemon to exit after
// SIGTERM before it sends SIGKILL: generous, so that a daemon on a loaded
// machine gets to close its sockets and detach its program.
const DaemonGrace = 30 * time.Second

// DaemonSpec is a process to run for a lab on one of its hosts.
type DaemonSpec struct {
	Host   string   // the host it serves: h0, h1, ...
	Path   string   // the executable
	Args   []string // its arguments, argv[0] not included
	Env    []string // its environment; nil: this process's
	Socket string   // the socket it serves, in the lab's state dir, removed with the lab
}

// Daemon is a process a lab runs on one of its hosts, as recorded in the
// lab's state dir.
type Daemon struct {
	Host   string   `json:"host"`
	Socket string   `json:"socket"`
	Log    string   `json:"log"` // its standard output and error
	PID    int      `json:"pid"`
	Args   []string `json:"args"`
	// Start is when the process started, in clock ticks after boot
	// (/proc/PID/stat): a later process given the same pid is not it.
	Start uint64 `json:"start_ticks"`
	// Alive says whether it runs, when Daemons read it.
	Alive bool `json:"alive"`
}

// Stopped is what StopDaemons did to a daemon.
type Stopped struct {
	Daemon
	// Early: it had exited before it was asked to stop (it failed, or
	// somebody killed it); LogTail holds the last lines of its log.
	Early   bool
	LogTail string
	// Killed: it did not exit within DaemonGrace of SIGTERM, and SIGKILL
	// ended it.
	Killed bool
}
