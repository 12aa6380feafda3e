"""Chores shared by every layer: atomic files and directories, lazy optional imports, file IO, memory release."""
