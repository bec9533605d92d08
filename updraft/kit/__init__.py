"""updraft.kit"""
