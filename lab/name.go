package lab

import (
	"fmt"
	"regexp"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_]{1,24}$`)

// CheckName reports whether a lab may be named name: 1 to 24 letters,
// digits or '_' (its namespaces' names hold it).
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("lab name %q: use 1 to 24 letters, digits or '_'", name)
	}
	return nil
}
