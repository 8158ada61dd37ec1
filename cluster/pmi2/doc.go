// Package pmi2 is a client of PMI-2, the process-management interface a
// launcher offers each task of a parallel job, in pure Go: the wire protocol
// as Slurm 22.05's mpi/pmi2 plugin (slurmstepd) speaks it on the descriptor
// PMI_FD that `srun --mpi=pmi2` hands each task.
//
// # Wire protocol
//
// The connection is a stream socket. It opens with PMI-1's version
// handshake, one line each way:
//
//	cmd=init pmi_version=2 pmi_subversion=0\n
//	cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n
//
// Every later message, either way, is a 6-byte decimal length field (digits
// then spaces: Slurm writes "%-6d"; leading spaces are accepted too) and that
// many bytes of `key=value;` pairs, the first pair naming the command:
//
//	61    cmd=fullinit;pmijobid=7.0;pmirank=2;threaded=FALSE;
//	115   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=2;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;
//
// A ';' inside a value is written ';;' (MPICH's client escapes it so, and its
// parser reads it back); a key holds neither '=' nor ';'. Keys are at most
// MaxKeyLen bytes and values MaxValLen bytes before escaping, as MPICH's
// client checks. The commands used here, with Slurm's answers:
//
//	cmd=fullinit;pmijobid=J;pmirank=R;threaded=FALSE;   fullinit-response: rc, rank, size, appnum, spawner-jobid (spawned jobs only)
//	cmd=job-getid;                                      job-getid-response: jobid ("JOBID.STEPID")
//	cmd=kvs-put;key=K;value=V;                          kvs-put-response: rc (the pair waits for the next fence)
//	cmd=kvs-fence;                                      kvs-fence-response: rc, once every task of the step has fenced
//	cmd=kvs-get;jobid=J;srcid=-1;key=K;                 kvs-get-response: rc, found=TRUE|FALSE, value
//	cmd=abort;isworld=TRUE;msg=M;                       no answer: Slurm kills the step (SIGKILL to every task)
//	cmd=finalize;                                       finalize-response: rc; Slurm then closes the connection
//
// # What Slurm 22.05's server does (read in src/plugins/mpi/pmi2, checked
// against the real slurmstepd by cluster's tests)
//
//   - It reads a value up to the first ';' and never unescapes ";;": a value
//     "a;b" (sent as "a;;b") is stored as "a", and the pairs after it in the
//     message are misread (a put whose key follows such a value is lost).
//     Nor does it escape the values it answers with. Client.Put therefore
//     refuses ';'; callers that need arbitrary bytes encode them first
//     (package cluster does).
//   - The key-value space is one for the whole step: kvs-get ignores jobid
//     and srcid, so keys must carry their owner (cluster's keys name the
//     rank). A key put again replaces the value.
//   - A fence completes only when every task of the step has sent kvs-fence,
//     through slurmstepd's tree over the nodes to srun and back; a task that
//     dies or hangs before its fence leaves the others waiting for ever.
//     Fence therefore takes a context, and a fence that times out leaves the
//     client unusable (its answer could still arrive).
//   - abort's message is not shown anywhere; Abort's caller prints it.
//
// A Client is safe for concurrent use; its requests are serialised, as the
// protocol has one request outstanding per connection.
package pmi2
