package nicfw

// The hosts of the engine tests' networks.
const (
	hostA HostID = 1
	hostB HostID = 2
)
