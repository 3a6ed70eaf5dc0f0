export default async function (args, g) {
  return 1;
}
