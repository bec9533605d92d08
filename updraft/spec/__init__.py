"""updraft.spec"""
