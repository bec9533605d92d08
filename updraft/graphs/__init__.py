"""updraft.graphs"""
