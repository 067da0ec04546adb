pub mod admin;
pub mod home;
pub mod not_found;
pub mod placeholder;
