package cluster

import "strings"

// DaemonSocketDir is the folder of the node daemons' sockets.
const DaemonSocketDir = "/run/xam"

// DaemonSocket returns the socket of this job's firmware daemon on this
// task's node, as `xam fw --job` serves it when not given --socket:
// /run/xam/job-JOBID.sock, JOBID being Job.JobID (Slurm's job id; a
// hostfile's digest), with any byte other than a letter, digit, '.', '-' or
// '_' written as '_'. Every step of a job computes the same path, which is
// how an application's step finds the daemons' step: Slurm gives each step
// a PMI-2 key space of its own, so what one step puts no other step can
// get. Daemons of two jobs on one node have two paths.
func (j *Job) DaemonSocket() string {
	id := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, j.JobID)
	return DaemonSocketDir + "/job-" + id + ".sock"
}
