"""Template-only synthesis: prompts, validated templates, local fill, dedup, screen, pools."""
