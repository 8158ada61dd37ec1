package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// TestHostile runs the hostile suite's short form (the one CI runs) on a
// veth pair: in each scenario every ping is handled exactly once, and the
// attacks were refused and counted. The other user's attacker is this
// binary run again as uid 65534 (TestMain hands it to HostileChild).
func TestHostile(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	r, err := runHostile(a, b, hostileConfig{Pings: 300, Flood: 20000})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]hostileRow{}
	for _, row := range r.Rows {
		rows[row.Scenario] = row
		if !row.ExactlyOnce || row.Pings != 300 || (row.Sent == 0) != (row.Scenario == "none (baseline)") {
			t.Errorf("%s: %+v", row.Scenario, row)
		}
	}
	if len(rows) != 9 {
		t.Fatalf("%d scenarios: %+v", len(r.Rows), r.Rows)
	}
	wire, local := rows["wire"].Counted, rows["local"].Counted
	if wire["unconfirmed epochs"] == 0 || wire["unknown sources"] == 0 || wire["restarts believed"] != 0 {
		t.Errorf("wire: %v", wire)
	}
	if local["opens refused: config"] != 5 || local["opens refused: in use"] != 1 || local["opens refused: quota"] != 1 ||
		local["connections refused: quota"] == 0 || local["garbage descriptors refused"] == 0 || local["endpoints left open"] != 0 ||
		local["large endpoints released off the engine"] != 1 {
		t.Errorf("local: %v", local)
	}
	if pool := rows["pool"].Counted; pool["refused: the sender's share"]+pool["stalled blocks taken back"] == 0 {
		t.Errorf("pool: the held pool was neither bounded nor taken back: %v", pool)
	}
	if user := rows["other user"].Counted; user["opens refused: permission"] == 0 || user["grants refused: permission"] == 0 ||
		user["connections refused: quota"] == 0 || user["root's tags and networks shown"] != 0 ||
		user["refused by the daemons"] != user["opens refused: permission"]+user["grants refused: permission"]+user["connections refused: quota"] {
		t.Errorf("other user: %v", user)
	}
	// The forger's first DATA or ACK with both epochs right falls out of
	// the window (it would fall in with probability 6/2^16) and renews the
	// epoch B asks of A; its later ones are stale.
	if forger := rows["on-path forger"].Counted; forger["out of window"]+forger["forged ACKs"] == 0 || forger["renewals"] == 0 ||
		forger["destination 0"] == 0 || forger["unconfirmed claims"] == 0 || forger["stale epochs"] == 0 || forger["restarts believed"] != 0 {
		t.Errorf("on-path forger: %v", forger)
	}
	// Root's round trips beside the other user's flood: before the
	// engine shared among users first they took 1.19 s (p99 967 ms,
	// against a p50 of 218 µs alone). On two CPUs both engines then spin
	// at full load beside the pings' threads, so what is left is mostly
	// the kernel's sharing of the CPUs (nicfw's TestEngineOwnerShare
	// counts the engine's share in engine runs); the bound is a fifth of
	// that p99.
	base, share := rows["none (baseline)"], rows["share"]
	if share.Counted["its requests delivered"] == 0 || share.RTT.P99 > int64(200*time.Millisecond) {
		t.Errorf("share: round trip p99 %v beside the flood, %v alone: %v", time.Duration(share.RTT.P99), time.Duration(base.RTT.P99), share.Counted)
	}
	if reg := rows["registry"].Counted; reg["strangers' messages dropped"] == 0 || reg["root's reads and writes"] == 0 {
		t.Errorf("registry: %v", reg)
	}
	if co := rows["coordination"].Counted; co["refused by A's module (bad, refused, stale)"] == 0 || co["tokens taken for lost"] != 0 || co["Stores delivered"] != 200 {
		t.Errorf("coordination: %v", co)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil || !strings.Contains(md.String(), "| wire |") {
		t.Errorf("markdown: %v\n%s", err, md.String())
	}
	t.Logf("\n%s", md.String())
}

// TestHostileDuplicated runs the suite (xam bench hostile --dup) on a lab
// whose switch delivers a tenth of the xam frames twice: every ping still
// handled once, in every scenario.
func TestHostileDuplicated(t *testing.T) {
	testenv.RequirePrivileged(t)
	sp, _ := SpecOf("hostile")
	p := Params{Count: 1000, Flood: 5000, Dup: 0.1}
	cfgs := sp.Labs(p)
	if len(cfgs) != 1 || !cfgs[0].Switch {
		t.Fatalf("hostile --dup's labs: %+v, want one with a switch", cfgs)
	}
	cfgs[0].Name = fmt.Sprintf("hdup%d", os.Getpid())
	l, err := lab.Up(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	res, err := sp.Run([]*lab.Lab{l}, p)
	if err != nil {
		t.Fatal(err)
	}
	r := res.(*hostileResult)
	if r.Dup != 0.1 || r.Duplicated == 0 || len(r.Rows) != 9 {
		t.Fatalf("dup %v, %d frames duplicated, %d rows", r.Dup, r.Duplicated, len(r.Rows))
	}
	t.Logf("%d frames delivered twice", r.Duplicated)
	for _, row := range r.Rows {
		if !row.ExactlyOnce || row.Pings != 100 {
			t.Errorf("%s: %+v", row.Scenario, row)
		}
	}
}
