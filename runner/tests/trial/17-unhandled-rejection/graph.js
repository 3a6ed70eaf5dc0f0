export const meta = {name: 'unhandled-rejection', slug: 'unhandled-rejection', version: '1'};
export default async function (args, g) {
  Promise.reject(new Error("lost"));
  return "done";
}
