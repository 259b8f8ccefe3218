"""The seed's three context layers and the manager that owns them."""

from foliko_cli.context.agent import AgentContext
from foliko_cli.context.manager import ContextManager
from foliko_cli.context.request import RequestContext
from foliko_cli.context.session import SessionContext

__all__ = ["AgentContext", "ContextManager", "RequestContext", "SessionContext"]
