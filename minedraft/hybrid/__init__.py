"""A second draft source beside the model drafter, chosen per request: a lookup source (suffix decoding:
suffix_drafts.py; n-gram matching: ngram_drafts.py), run where the scheduler plans (scheduler_drafts.py)."""
