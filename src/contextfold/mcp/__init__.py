"""The MCP server and the workspace tools it serves."""
