"""Chat clients: the protocol every model plugs into, and deterministic clients that need no network."""

from contextledger.clients._protocol import ChatClient, ChatResponse, Usage
from contextledger.clients._scripted import ScriptedChatClient

__all__ = ["ChatClient", "ChatResponse", "ScriptedChatClient", "Usage"]
