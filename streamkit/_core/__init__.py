"""Shared vocabulary: the leaf layer every other package may import; it imports nothing of ours.

Owns: errors, types, records (``Record``) and serializers, clocks, the processing context,
waiting helpers, the partitioner, references to a user's objects.
May import: nothing of ours.
"""
