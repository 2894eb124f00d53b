"""What a job is to its workers: the settings the operator resolves and stores with the job in Redis,
the checks made when a job is accepted, and where a worker pod finds the Secrets and volumes its pool
mounts. Shared by the operator (which builds and checks) and the workers (which read)."""
