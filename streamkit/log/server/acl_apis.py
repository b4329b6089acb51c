"""DescribeAcls (v1, see ``apis.py``): this broker has no authorizer, and answers as Kafka's does without one.

Kafka's ``AclApis.handleDescribeAcls`` with no authorizer configured answers SECURITY_DISABLED
with "No Authorizer is configured on the broker"; its admin client raises
``SecurityDisabledException``, which Kafka's own ``ClientCompatibilityTest`` counts as
DescribeAcls working. CreateAcls and DeleteAcls are not served (nothing could be stored).
"""

from __future__ import annotations

from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import DescribeAclsRequest, DescribeAclsResponse
from streamkit.log.server.state import BrokerState

NO_AUTHORIZER = "No Authorizer is configured on the broker"


async def describe_acls(
    state: BrokerState, header: RequestHeader, request: DescribeAclsRequest
) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
