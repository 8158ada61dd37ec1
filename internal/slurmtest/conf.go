package slurmtest

import (
	"fmt"
	"net"
	"strings"
)

// confParams is what slurm.conf is written from.
type confParams struct {
	dir       string   // the cluster's folder
	host      string   // the machine's short host name: SlurmctldHost
	nodes     []string // node names; one node named host is the machine itself
	partition string
	ctldPort  int
	nodePorts []int // a port per node
	user      string
}

// conf returns the text of slurm.conf.
func conf(p confParams) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# A private test cluster of xam's internal/slurmtest; removed with its folder.")
	line("ClusterName=xamtest")
	line("SlurmctldHost=%s(127.0.0.1)", p.host)
	line("SlurmctldPort=%d", p.ctldPort)
	line("SlurmUser=%s", p.user)
	line("SlurmdUser=%s", p.user)
	line("AuthType=auth/munge")
	line("CredType=cred/munge")
	line("AuthInfo=socket=%s/munge/munge.socket", p.dir)
	line("StateSaveLocation=%s/state", p.dir)
	line("SlurmdSpoolDir=%s/spool/%%n", p.dir)
	line("SlurmctldPidFile=%s/state/slurmctld.pid", p.dir)
	line("SlurmdPidFile=%s/spool/%%n/slurmd.pid", p.dir)
	line("SlurmctldLogFile=%s/log/slurmctld.log", p.dir)
	line("SlurmdLogFile=%s/log/slurmd-%%n.log", p.dir)
	line("MailProg=/bin/true")
	line("ProctrackType=proctrack/linuxproc")
	line("TaskPlugin=task/none")
	line("JobAcctGatherType=jobacct_gather/none")
	line("SelectType=select/cons_tres")
	line("SelectTypeParameters=CR_CPU")
	line("SchedulerType=sched/builtin")
	line("MpiDefault=pmi2")
	line("SlurmdParameters=config_overrides")
	line("ReturnToService=2")
	line("KillWait=2")
	for i, n := range p.nodes {
		if len(p.nodes) == 1 && n == p.host {
			line("NodeName=%s NodeAddr=127.0.0.1 Port=%d CPUs=8 State=UNKNOWN", n, p.nodePorts[i])
			continue
		}
		line("NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=8 State=UNKNOWN", n, p.nodePorts[i])
	}
	line("PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8", p.partition)
	return b.String()
}

// freePorts returns n distinct TCP ports that were free on all addresses a
// moment ago: all are held open together, then released.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("slurmtest: picking a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
