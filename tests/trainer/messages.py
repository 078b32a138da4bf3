"""TensorFlow error messages as the trainer receives them, for tests of the one line it keeps."""

PEER_LOST = (
    "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most recent call "
    'last):\n  File "<string>", line 6, in <module>\n\n  File "/app/trainer/train.py", line 228, '
    "in train_call\n\nCollective ops is aborted by: Error reported from /job:worker/task:1: The "
    "following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\n"
    "The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. "
    "preemption, eviction) to debug further.\nThe error could be from a previous operation. "
    "Restart your program to reset.\n\t [[{{node CollectiveReduceV2}}]] "
    "[Op:__inference_train_call_991]"
)
"""The chief of a 2-worker run after ``kill -9`` of worker 1 (TensorFlow 2.21), as raised by the
training call."""
PEER_LOST_LINE = (
    "Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks "
    "are unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1"
)
"""What the trainer keeps of :data:`PEER_LOST`."""
