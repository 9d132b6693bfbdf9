"""A second draft source beside the model drafter, chosen per request (suffix decoding: suffix_drafts.py)."""
