"""Shared vocabulary: the leaf layer every other package may import; it imports nothing of ours."""
