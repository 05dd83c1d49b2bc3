"""Users (admin): create, list, describe; attach or set policies; enrol TOTP MFA; unlock it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Request
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    WithJsonSchema,
)

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import Plane, Users
from podfleet.api.schemas import MfaEnrolment, Printable, UnlockedUser, User, UserList, keyed_schema
from podfleet.control import users
from podfleet.errors import ConflictError

router = APIRouter(prefix="/v1/users", tags=["users"])
# The schema lists the built-in policies, so a client (and the contract test) knows them.
BuiltinPolicy = Literal["ClusterAdmin", "Scheduler", "StorageAccess", "ReadOnly", "Auditor", "MFARequired"]
UserName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9._-]{0,62}$", description="user name")]
PolicyRef = Annotated[str, Path(pattern=r"^[A-Za-z][A-Za-z0-9._:-]{0,63}$",
                                description="a built-in policy, or (PUT with a body) an inline one's name")]


# Every string of a policy document is printable text (``security/text.py``): the document
# is shown back in tables and logs. Said in the schema (a pattern), so a document the
# schema allows is never refused for a character.
Text = Annotated[str, StringConstraints(min_length=1, max_length=256), Printable]
# One text or a list of them, told apart by the value's type: a refused list item is then
# named as the item (Action.1), not as "not a string". The tags are type names, which an
# error's field leaves out (api/problems.py).
Texts = Annotated[Annotated[Text, Tag("str")] | Annotated[list[Text], Field(min_length=1, max_length=100),
                                                          Tag("list[str]")],
                  Discriminator(lambda v: "list[str]" if isinstance(v, list) else "str")]
ConditionKey = Annotated[str, StringConstraints(min_length=1, max_length=256), Printable]
ConditionTests = Annotated[dict[ConditionKey, Texts], WithJsonSchema(keyed_schema(ConditionKey, Texts))]


class PolicyStatement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    Sid: Annotated[str, StringConstraints(max_length=64), Printable] | None = None
    Effect: Literal["Allow", "Deny"]
    Action: Texts = Field(..., description="operationIds, with * and ? wildcards")
    Resource: Texts = Field("*", description="cluster/NAME, job/ID, ... with wildcards")
    Condition: dict[Literal["Bool", "BoolIfExists", "StringEquals", "StringLike"], ConditionTests] | None = None


class PolicyDocument(BaseModel):
    """An IAM-style policy: explicit deny > allow > implicit deny."""

    model_config = ConfigDict(extra="forbid")
    Version: Annotated[str, StringConstraints(max_length=32), Printable] | None = None
    Statement: list[PolicyStatement] = Field(..., min_length=1, max_length=100)


class CreateUserRequest(BaseModel):
    name: str = Field(..., pattern=r"^[a-z][a-z0-9._-]{0,62}$", description="tokens named so belong to this user")
    policies: list[BuiltinPolicy] = Field(default_factory=list, max_length=20,
                                          description="built-in policies to attach")


@router.post("", operation_id="CreateUser", status_code=201, response_model=User,
             response_model_exclude_unset=True)
async def create_user(body: CreateUserRequest, request: Request, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    out = await plane.call(users.create, plane, body.name, list(body.policies), actor=who.actor)
    request.app.state.users.forget(body.name)
    return out


@router.get("", operation_id="ListUsers", response_model=UserList)
def list_users(directory: Users) -> dict[str, Any]:
    return {"users": users.listing(directory)}


@router.get("/{user}", operation_id="DescribeUser", response_model=User,
             response_model_exclude_unset=True)
def describe_user(user: UserName, directory: Users) -> dict[str, Any]:
    return users.describe(directory, user)


@router.put("/{user}/policies/{policy}", operation_id="PutUserPolicy", response_model=User,
             response_model_exclude_unset=True)
async def put_user_policy(user: UserName, policy: PolicyRef, request: Request, plane: Plane, who: CurrentPrincipal,
                          directory: Users, body: Annotated[PolicyDocument | None, Body()] = None) -> dict[str, Any]:
    """Attach the built-in ``policy`` (no body), or set an inline one (the body: a policy
    document of Statements)."""
    # The schema states the document's shape; the engine still parses its meaning.
    document = body.model_dump(exclude_unset=True) if body is not None else None
    if document:
        users.describe(directory, user)  # an unknown user is a 404 before the document is read, as on the engine
    out = await plane.call(users.put_policy, plane, user, policy, document or None, actor=who.actor)
    request.app.state.users.forget(user)
    return out


@router.delete("/{user}/policies/{policy}", operation_id="DeleteUserPolicy", response_model=User,
                response_model_exclude_unset=True)
async def delete_user_policy(user: UserName, policy: PolicyRef, request: Request, plane: Plane,
                             who: CurrentPrincipal) -> dict[str, Any]:
    out = await plane.call(users.delete_policy, plane, user, policy, actor=who.actor)
    request.app.state.users.forget(user)
    return out


@router.post("/{user}/mfa", operation_id="EnableMfa", status_code=201, response_model=MfaEnrolment,
             response_model_exclude_unset=True)
async def enable_mfa(user: UserName, request: Request, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Enrol TOTP: the otpauth URI and the recovery codes are in this answer only."""
    key = request.app.state.mfa_key
    if key is None:
        raise ConflictError("this server has no key to seal MFA secrets with (serve it with `podfleet up`)")
    out = await plane.call(users.enable_mfa, plane, user, key, actor=who.actor)
    request.app.state.users.forget(user)
    return out


@router.post("/{user}/unlock", operation_id="UnlockUser", response_model=UnlockedUser,
             response_model_exclude_unset=True)
async def unlock_user(user: UserName, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Clear the user's count of wrong MFA codes and the lock that ten of them set
    (audited; a user's token needs a second factor of its own)."""
    return await plane.call(users.unlock, plane, user, actor=who.actor)
