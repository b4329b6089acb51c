"""The group coordinator: classic consumer-group membership, rebalances and committed offsets.

Layers, bottom up; each module's docstring states its invariants:

* ``messages``   plain values: config, requests, results, parked-request steps
* ``membership`` one group's member table (members, pending ids, static ids, leader, votes)
* ``outbox``     one group's parked requests (tickets) and the results owed to them
* ``group``      one group's state machine (Kafka's GroupCoordinator semantics), plain code
* ``registry``   all groups of a coordinator, plain code
* ``store``      the ``GroupOffsetStore`` port and an in-memory store
* ``coordinator`` ``GroupCoordinator``: the asyncio shell the wire server calls
"""

from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.groups.errors import (
    CoordinatorClosedError,
    GroupCoordinatorError,
    GroupErrorCode,
)
from streamkit.log.groups.group import Group
from streamkit.log.groups.messages import (
    OFFSET_METADATA_MAX_BYTES,
    Delivery,
    GroupConfig,
    GroupDescription,
    GroupListing,
    GroupState,
    HeartbeatResult,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupResult,
    ListGroupsResult,
    MemberDescription,
    OffsetCommitResult,
    OffsetFetchResult,
    Parked,
    Step,
    SyncGroupResult,
    metadata_fits,
)
from streamkit.log.groups.registry import GroupRegistry
from streamkit.log.groups.store import GroupOffsetStore, MemoryOffsetStore

__all__ = [
    "OFFSET_METADATA_MAX_BYTES",
    "CoordinatorClosedError",
    "Delivery",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupCoordinatorError",
    "GroupDescription",
    "GroupErrorCode",
    "GroupListing",
    "GroupOffsetStore",
    "GroupRegistry",
    "GroupState",
    "HeartbeatResult",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResult",
    "LeaveGroupResult",
    "ListGroupsResult",
    "MemberDescription",
    "MemoryOffsetStore",
    "OffsetCommitResult",
    "OffsetFetchResult",
    "Parked",
    "Step",
    "SyncGroupResult",
    "metadata_fits",
]
