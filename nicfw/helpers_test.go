package nicfw

import "slices"

// residentEndpoints returns the ids of the resident endpoints, in id order.
func (e *Engine) residentEndpoints() []EndpointID {
	var ids []EndpointID
	for id, s := range e.eps {
		if s != nil && s.resident {
			ids = append(ids, EndpointID(id))
		}
	}
	return slices.Clip(ids)
}

// inFlight returns the number of messages in flight.
func (e *Engine) inFlight() int { return len(e.flights) - len(e.freeFl) }

// The hosts of the engine tests' networks.
const (
	hostA HostID = 1
	hostB HostID = 2
)
