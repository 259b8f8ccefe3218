"""The session and message model, and what every layer shares about a message: attachments,
fences, token estimates, turns, usage."""
