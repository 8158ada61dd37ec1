package lab

// State says who holds a lab.
type State string

// The states of a lab.
const (
	// Owned: a live process built it for a run and holds it (its lock).
	Owned State = "owned"
	// Stale: the process that built it for a run is gone (it was killed,
	// or crashed) and left it behind; DownStale removes it.
	Stale State = "stale"
	// Persistent: built to stay (`xam lab up`); only a Down by name or
	// DownAll removes it.
	Persistent State = "persistent"
)

// Info describes a lab that exists.
type Info struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	Owner int    `json:"owner_pid,omitempty"` // the pid that built it (Owned and Stale)
	// Daemons are the processes it runs on its hosts (`xam lab up --fw`).
	Daemons []Daemon `json:"daemons,omitempty"`
}
