package bench

import (
	"strings"
	"testing"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestHostile runs the hostile suite's short form (the one CI runs) on a
// veth pair: in each scenario every ping is handled exactly once, and the
// attacks were refused and counted. The other user's attacker is this
// binary run again as uid 65534 (TestMain hands it to HostileChild).
func TestHostile(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	r, err := RunHostile(a, b, HostileConfig{Pings: 300, Flood: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 5 {
		t.Fatalf("%d scenarios: %+v", len(r.Rows), r.Rows)
	}
	for _, row := range r.Rows {
		if !row.ExactlyOnce || row.Pings != 300 || row.Sent == 0 {
			t.Errorf("%s: %+v", row.Scenario, row)
		}
	}
	wire, local := r.Rows[0].Counted, r.Rows[1].Counted
	if wire["unconfirmed epochs"] == 0 || wire["unknown sources"] == 0 || wire["restarts believed"] != 0 {
		t.Errorf("wire: %v", wire)
	}
	if local["opens refused: config"] != 5 || local["opens refused: in use"] != 1 || local["opens refused: quota"] != 1 ||
		local["connections refused: quota"] == 0 || local["garbage descriptors refused"] == 0 || local["endpoints left open"] != 0 {
		t.Errorf("local: %v", local)
	}
	if pool := r.Rows[2].Counted; pool["refused: the sender's share"]+pool["stalled blocks taken back"] == 0 {
		t.Errorf("pool: the held pool was neither bounded nor taken back: %v", pool)
	}
	if user := r.Rows[3].Counted; user["opens refused: permission"] == 0 || user["grants refused: permission"] == 0 ||
		user["connections refused: quota"] == 0 || user["root's tags and networks shown"] != 0 ||
		user["refused by the daemons"] != user["opens refused: permission"]+user["grants refused: permission"]+user["connections refused: quota"] {
		t.Errorf("other user: %v", user)
	}
	// The forger's first DATA or ACK with both epochs right falls out of
	// the window (it would fall in with probability 6/2^16) and renews the
	// epoch B asks of A; its later ones are stale.
	if forger := r.Rows[4].Counted; forger["out of window"]+forger["forged ACKs"] == 0 || forger["renewals"] == 0 ||
		forger["destination 0"] == 0 || forger["unconfirmed claims"] == 0 || forger["stale epochs"] == 0 || forger["restarts believed"] != 0 {
		t.Errorf("on-path forger: %v", forger)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil || !strings.Contains(md.String(), "| wire |") {
		t.Errorf("markdown: %v\n%s", err, md.String())
	}
	t.Logf("\n%s", md.String())
}
