"""DescribeClientQuotas (v0-1): this broker enforces no client quotas yet, and says so truthfully.

Kafka's ``kafka-configs --describe --entity-type users`` asks DescribeClientQuotas before
DescribeUserScramCredentials, and fails as a whole when the first is not served. Here no
quota can be set (AlterClientQuotas is not served), so the true answer to any filter is no
entries, which is what Kafka answers when none is configured.
"""

from __future__ import annotations

from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from streamkit.log.server.state import BrokerState


async def describe_client_quotas(
    state: BrokerState, header: RequestHeader, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(entries=[])
