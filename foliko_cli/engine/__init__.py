"""The turn: the seed's AgentChatHandler and Framework, compression, prompts, tools and
where they come from (plugins, skills, agents), dry runs."""
