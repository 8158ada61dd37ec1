package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// stepEnv is the environment of rank 5 of 8 tasks on n[0-3], two per node,
// as srun sets it (PMI_FD aside).
func stepEnv() map[string]string {
	return map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
		"SLURM_NODEID": "2", "SLURM_STEP_NODELIST": "n[0-3]", "SLURM_JOB_NODELIST": "n[0-3],gpu01",
		"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "n2", "SLURM_MPI_TYPE": "pmi2",
		"PMI_RANK": "5", "PMI_SIZE": "8", "PMI_JOBID": "42.0",
	}
}

func getenvOf(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestSlurmEnv(t *testing.T) {
	j, err := slurmEnv(getenvOf(stepEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if j.Rank != 5 || j.Size != 8 || j.LocalRank != 1 || j.NodeID != 2 || j.Node != "n2" || j.HostID != 2 ||
		!slices.Equal(j.Nodes, []string{"n0", "n1", "n2", "n3"}) || j.JobID != "42" || j.StepID != "0" {
		t.Errorf("%+v", j)
	}
	// A step on part of the job: host ids count the job's nodes.
	env := stepEnv()
	env["SLURM_STEP_NODELIST"], env["SLURM_NODEID"], env["SLURM_JOB_NODELIST"] = "n[2-3]", "0", "n[0-3]"
	if j, err := slurmEnv(getenvOf(env)); err != nil || j.Node != "n2" || j.NodeID != 0 || j.HostID != 2 {
		t.Errorf("step on n[2-3]: %+v, %v", j, err)
	}
}

// TestJoinErrors: without a launcher, or with a broken one, Join says what
// is missing.
func TestJoinErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change map[string]string // "" deletes
		want   string
		noJob  bool // wraps ErrNoLauncher
	}{
		{"no slurm", map[string]string{"SLURM_PROCID": "", "SLURM_JOB_ID": ""},
			"cluster: not a task of a job: not in a Slurm job step: SLURM_PROCID is not set; " +
				"run under `srun --mpi=pmi2`, or use a hostfile (cluster.FromHostfile)", true},
		{"batch script", map[string]string{"SLURM_STEP_NODELIST": ""},
			"in Slurm job 42 but not in a step started by srun (SLURM_PROCID or SLURM_STEP_NODELIST is not set: a batch script?); " +
				"start the tasks with `srun --mpi=pmi2`", true},
		{"no pmi", nil,
			"cluster: not a task of a job: PMI_FD is not set: srun was not given --mpi=pmi2 (or MpiDefault=pmi2 in slurm.conf), " +
				"so this task has no PMI-2 server to exchange through", true},
		{"pmix", map[string]string{"SLURM_MPI_TYPE": "pmix"}, "(this step was started with --mpi=pmix)", true},
		{"ntasks", map[string]string{"SLURM_STEP_NUM_TASKS": "", "SLURM_NTASKS": "x"}, `SLURM_NTASKS="x" is not a number >= 0`, false},
		{"no ntasks", map[string]string{"SLURM_STEP_NUM_TASKS": "", "SLURM_NTASKS": ""}, "SLURM_NTASKS is not set", false},
		{"no localid", map[string]string{"SLURM_LOCALID": ""}, "SLURM_LOCALID is not set", false},
		{"negative", map[string]string{"SLURM_PROCID": "-1"}, `SLURM_PROCID="-1" is not a number`, false},
		{"rank", map[string]string{"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is not a rank of SLURM_NTASKS=8 tasks", false},
		{"nodeid", map[string]string{"SLURM_NODEID": "4"}, `SLURM_NODEID=4 but SLURM_STEP_NODELIST="n[0-3]" has 4 nodes`, false},
		{"nodename", map[string]string{"SLURMD_NODENAME": "n3"}, "SLURMD_NODENAME=n3 but node 2 of SLURM_STEP_NODELIST is n2", false},
		{"nodelist", map[string]string{"SLURM_STEP_NODELIST": "n[0-"}, "SLURM_STEP_NODELIST: cluster: bad hostlist", false},
		{"twice", map[string]string{"SLURM_STEP_NODELIST": "n[0-2],n2"}, "names node n2 twice", false},
		{"job nodelist", map[string]string{"SLURM_JOB_NODELIST": "m[0-3]"}, `node n2 of the step is not in SLURM_JOB_NODELIST="m[0-3]"`, false},
		{"no job id", map[string]string{"SLURM_JOB_ID": ""}, "SLURM_JOB_ID is not set", false},
		{"pmi rank", map[string]string{"PMI_FD": "3", "PMI_RANK": "4"}, "PMI_RANK=4 but Slurm's environment says 5", false},
		{"pmi size", map[string]string{"PMI_FD": "3", "PMI_SIZE": "9"}, "PMI_SIZE=9 but Slurm's environment says 8", false},
		{"pmi fd", map[string]string{"PMI_FD": "three"}, `PMI_FD="three" is not a number`, false},
		{"bad fd", map[string]string{"PMI_FD": "987654"}, "PMI-2 on PMI_FD=987654: pmi2: descriptor 987654 is not a socket", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := stepEnv()
			for k, v := range tc.change {
				env[k] = v
			}
			j, err := join(context.Background(), getenvOf(env))
			if err == nil {
				j.Close()
				t.Fatal("Join succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Join: %v\nwant %q", err, tc.want)
			}
			if errors.Is(err, ErrNoLauncher) != tc.noJob {
				t.Errorf("Join: %v; errors.Is(ErrNoLauncher) = %v", err, !tc.noJob)
			}
		})
	}
}

// TestJoinOutsideSlurm: this test process, with Slurm's variables cleared,
// is not a task.
func TestJoinOutsideSlurm(t *testing.T) {
	for _, k := range []string{"SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_NODELIST", "PMI_FD"} {
		t.Setenv(k, "")
	}
	_, err := Join(context.Background())
	if !errors.Is(err, ErrNoLauncher) || !strings.Contains(err.Error(), "SLURM_PROCID is not set") {
		t.Errorf("Join: %v", err)
	}
}

// FuzzSlurmEnv: whatever Slurm's variables hold, slurmEnv gives a job or
// an error, never a panic, and a job it gives is consistent.
func FuzzSlurmEnv(f *testing.F) {
	f.Add("5", "8", "1", "2", "n[0-3]", "n[0-3],gpu01", "n2")
	f.Add("0", "1", "0", "0", "vm", "", "")
	f.Add("3", "4", "0", "9", "n[0-3]", "x", "n0")
	f.Fuzz(func(t *testing.T, procid, ntasks, localid, nodeid, steplist, joblist, nodename string) {
		env := map[string]string{"SLURM_PROCID": procid, "SLURM_NTASKS": ntasks, "SLURM_LOCALID": localid,
			"SLURM_NODEID": nodeid, "SLURM_STEP_NODELIST": steplist, "SLURM_JOB_NODELIST": joblist,
			"SLURMD_NODENAME": nodename, "SLURM_JOB_ID": "1"}
		j, err := slurmEnv(getenvOf(env))
		if err != nil {
			return
		}
		if j.Rank < 0 || j.Rank >= j.Size || j.NodeID < 0 || j.NodeID >= len(j.Nodes) || j.Nodes[j.NodeID] != j.Node || j.HostID < 0 {
			t.Fatalf("inconsistent job %+v", j)
		}
	})
}
