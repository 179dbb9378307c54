"""Code that only one recipe uses, a folder per recipe; shared stages live by technique elsewhere."""
