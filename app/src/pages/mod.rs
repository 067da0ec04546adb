pub mod admin;
pub mod home;
pub mod nav;
pub mod not_found;
