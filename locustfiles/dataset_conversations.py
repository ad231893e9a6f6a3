"""Conversations from a dataset file (JSONL prompts or conversations, ShareGPT JSON), turn by turn
with the server's replies as history and think time between turns, stepped through --levels.

    vllm-load run --host http://127.0.0.1:8000 --dataset sample --think-time 1,5    # the same test
    locust -f locustfiles/dataset_conversations.py --host http://127.0.0.1:8000 --headless \
        --dataset ShareGPT_V3_unfiltered_cleaned_split.json --dataset-turns 4 --levels 10,50,100

docs/workload.md describes the formats; --output-lengths draws output lengths where the file
gives none, --scripted-replies carries the file's replies as history instead of the server's.
"""

from vllm_load.locustfile import DatasetUser, SteppedShape  # noqa: F401
