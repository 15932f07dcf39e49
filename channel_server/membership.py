"""Who belongs to a channel's groups: joining, leaving, being forgotten (DESIGN §4, §6).

:class:`Membership` changes the groups' members and keeps the backup, the push links and
liveness in step with them. Its entry methods take the channel lock; the ones marked
"under the lock" are for the other parts, which hold it already. Members live in the core,
their links in the push side; it keeps only which users file it last checked them by.
"""

from __future__ import annotations

import logging
from typing import Any

from channel_server import boundary
from channel_server.access import Access
from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import PULL_CALLBACK, Member
from channel_server.dispatch import answers
from channel_server.errors import LimitReached, SubscriberIdInUse
from channel_server.liveness import Liveness
from channel_server.log_throttle import Throttle
from channel_server.push import PushDelivery
from channel_server.store.base import MemberRecord
from channel_server.users import Action
from channel_server.wire import DEFAULT_GROUP

log = logging.getLogger("channel_server.channel")


class Membership:
    """Subscribe, unsubscribe, forget and expire members; who may act for one."""

    def __init__(
        self,
        state: ChannelState,
        access: Access,
        backup: ChannelBackup,
        push: PushDelivery,
        liveness: Liveness,
    ) -> None:
        self._state = state
        self._name = state.name
        self._core = state.core
        self._access = access
        self._backup = backup
        self._push = push
        self._liveness = liveness
        self._users_seen = -1
        """The users file's generation :meth:`drop_revoked` last looked at (under the
        channel lock)."""
        self._refusals = Throttle(log)
        """Subscribers refused at a cap, logged at most every 10 s."""

    def group_of(self, subscriber_id: str, group: str | None) -> str:
        """The group named (checked), or the subscriber's default one."""
        if group is None:
            return self._core.default_group_for(subscriber_id)
        return boundary.check_name("group", group)

    def acting(self, group: str, subscriber_id: str) -> ConsumerGroup | None:
        """Under the lock: the group, if the subscriber id is a member of it; raises
        NotAuthorized unless the caller may subscribe here and the id is its own (or it
        is an admin)."""
        self._access.require(Action.SUBSCRIBE, self._name)
        grp = self._core.groups.get(group)
        member = grp.members.get(subscriber_id) if grp else None
        if member is None:
            return None
        self._access.require_owner(member.user, subscriber_id, self._name)
        return grp

    # -- joining -------------------------------------------------------------------------
    def subscribe(
        self, subscriber_id: str, group: str, callback: str, prefetch: int, secret: str
    ) -> dict[str, Any]:
        """Join or resume (arguments checked already): see EventChannel.subscribe. An id
        active at another callback is pinged first, outside the lock: one that answers
        keeps it (SubscriberIdInUse)."""
        pull = callback == PULL_CALLBACK
        self._access.require(Action.SUBSCRIBE, self._name)
        claimed = self._active_elsewhere(group, subscriber_id, callback)
        if claimed and answers(claimed[0], self._state.config.liveness_timeout_s, claimed[1]):
            raise SubscriberIdInUse(subscriber_id, group)
        with self._state.lock:
            self._backup.repair()
            grp = self._core.groups.get(group)
            if grp is not None:
                self._may_join(grp, subscriber_id)
            if grp is None or subscriber_id not in grp.members:
                try:
                    self._within_share()
                    self._make_room(group)
                except LimitReached as exc:
                    self._refusals.warning(
                        "members", "%s: refused %s: %s", self._name, subscriber_id, exc
                    )
                    raise
            grp = self._add_group(group)
            self._may_take(grp, grp.members.get(subscriber_id), callback, claimed)
            user = self._access.current().name
            member = grp.join(
                subscriber_id,
                callback,
                prefetch,
                self._core.new_session(),
                self._state.now(),
                pull,
                user=user,
                secret=secret,
            )
            record = MemberRecord(
                self._name, group, subscriber_id, callback, prefetch, user, secret
            )
            self._backup.member_saved(record)
            if not pull:
                self._push.member_joined((group, subscriber_id), callback, secret)
                self._liveness.note((group, subscriber_id))
            self._push.changed()
            partitions = sorted(member.partitions, key=str)
        mode = "pull" if pull else "push"
        log.info(
            "%s: %s joined group %s (%s, prefetch %d)",
            self._name,
            subscriber_id,
            group,
            mode,
            prefetch,
        )
        return {
            "channel": self._name,
            "kind": self._core.kind.value,
            "group": group,
            "subscriber_id": subscriber_id,
            "mode": mode,
            "prefetch": prefetch,
            "session": member.session,
            "heartbeat_s": self._state.config.heartbeat_s,
            "handler_timeout_s": self._state.config.handler_timeout_s,
            "ack_timeout_s": self._state.config.ack_timeout_s,
            "partitions": [list(key) for key in partitions],
        }

    def resume(self) -> None:
        """Under the lock, after a restore: push again to the push members the store kept."""
        for grp in self._core.groups.values():
            for member in grp.members.values():
                if not member.pull:
                    key = (grp.name, member.member_id)
                    self._push.member_joined(key, member.callback, member.secret)

    def _active_elsewhere(
        self, group: str, subscriber_id: str, callback: str
    ) -> tuple[str, str] | None:
        """(callback, secret) of an active member with this id at another address, if any;
        NotAuthorized first if the id is another user's."""
        with self._state.lock:
            grp = self._core.groups.get(group)
            member = grp.members.get(subscriber_id) if grp else None
            if member is None:
                return None
            self._access.require_owner(member.user, subscriber_id, self._name)
            if member.active and member.callback != callback:
                return member.callback, member.secret
        return None

    def _may_join(self, grp: ConsumerGroup, subscriber_id: str) -> None:
        """A group other than ``default`` belongs to the users of its members: another
        user (not an admin of the channel) may not add a subscriber to it, or it would
        take a share of that subscription's events (session 32: bob got half of
        alice's). The ``default`` group of a channel is shared by every user that may
        subscribe (competing consumers)."""
        if grp.name == DEFAULT_GROUP or subscriber_id in grp.members or not grp.members:
            return
        users = {member.user for member in grp.members.values()}
        self._access.require_group(users, grp.name, self._name)

    def _may_take(
        self,
        grp: ConsumerGroup,
        existing: Member | None,
        callback: str,
        claimed: tuple[str, str] | None,
    ) -> None:
        """Refuse to resume a subscriber id of another user, or one claimed meanwhile."""
        if existing is None:
            return
        self._access.require_owner(existing.user, existing.member_id, self._name)
        if existing.active and existing.callback != callback:
            if claimed is None or existing.callback != claimed[0]:  # claimed again meanwhile
                raise SubscriberIdInUse(existing.member_id, grp.name)
            log.warning(
                "%s: %s resubscribed from %s; its old session at %s does not answer",
                self._name,
                existing.member_id,
                callback,
                existing.callback,
            )
        if not existing.active:
            log.warning(
                "%s: %s readmitted (it was inactive: %s)",
                self._name,
                existing.member_id,
                existing.inactive_reason,
            )

    def _within_share(self) -> None:
        """A user of the users file holds at most its share of the members (the owner and
        the channel's admins: any number); LimitReached past it."""
        user = self._access.current()
        if user.broker or user.allows(Action.ADMIN, self._name):
            return
        share = self._state.config.member_share
        if self._core.members_of(user.name) >= share:
            raise LimitReached(f"members of user {user.name}", share, f"channel {self._name}")

    def _make_room(self, joining: str) -> None:
        """Room for a new member of group ``joining`` (see ChannelCore.make_room_for_member);
        raises LimitReached."""
        for group, member_id in self._core.make_room_for_member():
            log.warning(
                "%s: %s (inactive) forgotten to make room for a new member (max %d members)",
                self._name,
                member_id,
                self._state.config.max_members,
            )
            self._gone(group, member_id, keep_group=group == joining)

    def _add_group(self, group: str) -> ConsumerGroup:
        if group not in self._core.groups:
            grp = self._core.add_group(group)
            self._backup.group_added(group, grp.created_offset)
        return self._core.groups[group]

    # -- leaving -------------------------------------------------------------------------
    def unsubscribe(self, subscriber_id: str, group: str, session: int | None = None) -> bool:
        """See EventChannel.unsubscribe."""
        with self._state.lock:
            grp = self.acting(group, subscriber_id)
            if grp is None:
                return False
            if session is not None and grp.members[subscriber_id].session != session:
                log.info(
                    "%s: an unsubscribe of %s's ended session %d ignored (another process "
                    "holds the id now)",
                    self._name,
                    subscriber_id,
                    session,
                )
                return False
            grp.leave(subscriber_id)
            self._gone(group, subscriber_id)
            self._push.changed()
        log.info("%s: %s left group %s", self._name, subscriber_id, group)
        return True

    def forget(self, subscriber_id: str, group: str, force: bool) -> dict[str, Any]:
        """See EventChannel.forget (the caller checked the admin permission)."""
        with self._state.lock:
            gone = self._core.forget_member(group, subscriber_id, force)
            self._gone(group, subscriber_id)
            self._push.changed()
            dropped = group not in self._core.groups
        state = "active" if gone.was_active else f"inactive: {gone.inactive_reason}"
        log.warning("%s: %s forgotten from group %s (%s)", self._name, subscriber_id, group, state)
        return dict(gone.to_dict(), channel=self._name, group_dropped=dropped)

    def expire(self, now: float) -> None:
        """Under the lock: forget the members inactive past ``member_expiry_s``."""
        for group, member_id in self._core.expire_members(now):
            log.warning(
                "%s: %s forgotten from group %s: inactive with no sign of life for %g s",
                self._name,
                member_id,
                group,
                self._state.config.member_expiry_s,
            )
            self._gone(group, member_id)

    def drop_revoked(self) -> None:
        """Under the lock: forget the members whose user may no longer subscribe here (it
        left the users file, or lost the grant), so that their events go to others at
        once. Their calls were refused already, but the channel went on pushing to them
        (session 33's operator probe), across a restart too. Looked at when the users
        file was read anew, and in the first round after a restore."""
        generation = self._access.users_generation
        if generation == self._users_seen:
            return
        self._users_seen = generation
        for group, grp in list(self._core.groups.items()):
            for member_id, member in list(grp.members.items()):
                if self._access.may(member.user, Action.SUBSCRIBE, self._name):
                    continue
                self._core.forget_member(group, member_id, force=True)
                log.warning(
                    "%s: %s forgotten from group %s: its user %r may no longer subscribe here",
                    self._name,
                    member_id,
                    group,
                    member.user,
                )
                self._gone(group, member_id)

    def _gone(self, group: str, member_id: str, keep_group: bool = False) -> None:
        """After a member left its group: close its link, forget its subscription, and
        drop a group other than ``default`` that has no member left (unless
        ``keep_group``: someone is joining it)."""
        self._push.member_left((group, member_id))
        self._backup.member_removed(group, member_id)
        grp = self._core.groups.get(group)  # gone with an earlier member of the same round
        if group != DEFAULT_GROUP and grp is not None and not grp.members and not keep_group:
            gone = self._core.drop_group(group)
            self._backup.group_dropped(group, gone)
            log.log(  # events nobody will process: an operator should hear of them
                logging.WARNING if gone else logging.INFO,
                "%s: group %s dropped with its last member, and %d events only it held",
                self._name,
                group,
                len(gone),
            )

    # -- reading -------------------------------------------------------------------------
    def memberships(self, subscriber_id: str) -> list[dict[str, Any]]:
        """See EventChannel.memberships. Only the subscriber id's own user (or an admin)
        learns its groups: to anyone else the id belongs to no group here."""
        user = self._access.require(Action.SUBSCRIBE, self._name)
        admin = user.allows(Action.ADMIN, self._name)
        with self._state.lock:
            return [
                {
                    "channel": self._name,
                    "kind": self._core.kind.value,
                    "group": name,
                    "mode": "pull" if member.pull else "push",
                }
                for name, grp in self._core.groups.items()
                if (member := grp.members.get(subscriber_id)) is not None
                and (admin or member.user == user.name)
            ]
