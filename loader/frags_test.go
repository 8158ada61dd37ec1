//go:build linux

package loader

import "testing"

// TestRunFrags runs the program tests again on the frags-aware program
// (Config.Frags, xam_xdp_frags): on frames of one buffer it decides and
// counts as xam_xdp does, faults and checks included.
func TestRunFrags(t *testing.T) {
	frags = true
	t.Cleanup(func() { frags = false })
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"OurFrames", TestRunOurFrames}, {"OtherFramesPass", TestRunOtherFramesPass}, {"ShortFrames", TestRunShortFrames},
		{"Malformed", TestRunMalformed}, {"EtherType", TestRunEtherType}, {"DstMAC", TestRunDstMAC}, {"HEC", TestRunHEC},
		{"HECMatchesReference", TestRunHECMatchesReference}, {"Admission", TestRunAdmission}, {"FaultRates", TestRunFaultRates},
		{"FaultsAlwaysAndOff", TestRunFaultsAlwaysAndOff}, {"SeededFaultsRepeat", TestRunSeededFaultsRepeat},
		{"CorruptFlipsOnePayloadByte", TestRunCorruptFlipsOnePayloadByte}, {"UDP", TestRunUDP}, {"UDPCorrupt", TestRunUDPCorrupt}, {"UDPLocal", TestRunUDPLocal},
	} {
		t.Run(c.name, c.f)
	}
	p := load(t, Config{})
	if info, err := p.XDP().Info(); err != nil || info.Name != xamProgXamXdpFrags {
		t.Errorf("the program loaded is %q (%v), want %s", info.Name, err, xamProgXamXdpFrags)
	}
}
