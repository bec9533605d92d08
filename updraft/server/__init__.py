"""updraft.server"""
